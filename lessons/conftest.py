"""Which lesson notebooks nbval runs in `make test`.

Every English lesson, and one built translation, `es/lesson_02_ddp_basics.ipynb`, as the proof that a built
translation runs. The other translations are not run again: their code cells, outputs and metadata are
the English lesson's, byte for byte (tests/test_translate.py), so running them would repeat the English run.
"""

import glob
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_TRANSLATED = {os.path.join("es", "lesson_02_ddp_basics.ipynb")}

collect_ignore = [
    os.path.relpath(path, HERE)
    for path in glob.glob(os.path.join(HERE, "*", "*.ipynb"))
    if os.path.relpath(path, HERE) not in RUN_TRANSLATED
]
