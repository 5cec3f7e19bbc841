"""Helpers of the lesson notebooks (lessons/*.ipynb): the Quick Checks (quiz; their keys in quiz_questions), the figures (plots),
and output that carries no path of the machine that ran it (show). Each function names the lesson
and section where it is used."""
