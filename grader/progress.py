"""python -m grader progress: which tasks of which assignments pass (to be built, issue 8)."""


def register(sub) -> None:
    parser = sub.add_parser("progress", help="which tasks of which assignments pass, from your notebooks")
    parser.set_defaults(func=lambda args: print("not built yet") or 1)
