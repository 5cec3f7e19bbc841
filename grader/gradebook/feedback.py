"""What a student reads under a check cell: its ✓/✗ lines, not nbgrader's partial-credit number.

Under autograde, check() returns the task's points: nbgrader reads that result
as the cell's partial credit. Once the grade is saved, StripCheckPoints drops
it. `make grade` runs it inside autograde (inject.py); nbgrader_config.py also
runs it in generate_feedback, so feedback from plain `nbgrader autograde`
(the formgrader's button) shows no `Out[ ]: 4` either. Light: nbgrader only.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from grader import cells


class StripCheckPoints(NbGraderPreprocessor):
    """Drops the execute_result of every check cell (grade id `<task>_check`)."""

    def preprocess_cell(self, cell, resources, index):
        if cells.is_check_cell(cell):
            cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "execute_result"]
        return cell, resources
