"""The gradebook writer checks nbgrader's schema once, and every cell's metadata exactly as nbgrader would."""

import copy

import jsonschema
import pytest
from nbformat.v4 import new_code_cell

import grader.gradebook.inject  # noqa: F401  (installs the once-checked schema into nbgrader's validator)
from nbgrader.nbgraderformat import common, v3

GOOD = {
    "grade": True,
    "solution": False,
    "locked": True,
    "points": 2,
    "grade_id": "check_setup",
    "schema_version": 3,
    "task": False,
}
BAD = [  # what a student's editor can leave in a submission's metadata
    {**GOOD, "points": "two"},
    {**GOOD, "grade": "yes"},
    {**GOOD, "unexpected": 1},
    {**GOOD, "grade_id": 5},
]


def _plain_error(meta: dict) -> str | None:
    try:
        jsonschema.validate(meta, v3.MetadataValidatorV3().schema)
    except jsonschema.ValidationError as exc:
        return exc.message
    return None


def test_the_gradebook_writer_validates_through_the_once_checked_schema():
    assert type(common.jsonschema).__name__ == "_SchemaCheckedOnce"


def test_valid_metadata_passes_as_before():
    validator = v3.MetadataValidatorV3()
    for _ in range(3):
        validator.validate_cell(new_code_cell("x = 1", metadata={"nbgrader": copy.deepcopy(GOOD)}))
    assert _plain_error(GOOD) is None


@pytest.mark.parametrize("meta", BAD, ids=["points-string", "grade-string", "extra-key", "grade-id-number"])
def test_invalid_metadata_fails_with_the_error_plain_jsonschema_gives(meta):
    expected = _plain_error(meta)
    assert expected is not None, "the case must be invalid for nbgrader's own schema"
    with pytest.raises(jsonschema.ValidationError) as caught:
        v3.MetadataValidatorV3().validate_cell(new_code_cell("x = 1", metadata={"nbgrader": copy.deepcopy(meta)}))
    assert caught.value.message == expected
