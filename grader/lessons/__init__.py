"""Helpers of the lesson notebooks (lessons/*.ipynb): the Quick Checks (quiz; their keys in quiz_questions), the figures (plots),
and output that carries no path of the machine that ran it (show). Each function names the lesson
and section where it is used.

Modules: quiz.py and quiz_questions.py (the Quick Checks and their keys), plots.py, plots_memory.py,
plots_lessons_1_4.py, plots_moe.py, plots_practice.py, plots_steptime.py (each lesson's figures), show.py (output without the
machine's paths), timing.py, trace.py, notebook_torchrun.py."""
