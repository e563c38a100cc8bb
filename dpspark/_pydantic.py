"""The pydantic 1.x model API, under either major version: one model code for both.

pydantic 2 (and 1.10.17+) keep the 1.x API under ``pydantic.v1``; Databricks Runtime 14.3 and
15.4 ship pydantic 1.10.6, which has it only at the top level.
"""

try:
    from pydantic.v1 import BaseModel, Field, ValidationError, create_model, root_validator, validator
except ImportError:  # pydantic 1.10 before 1.10.17
    from pydantic import BaseModel, Field, ValidationError, create_model, root_validator, validator  # type: ignore[no-redef]

__all__ = ["BaseModel", "Field", "ValidationError", "create_model", "root_validator", "validator"]
