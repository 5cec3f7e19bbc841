def _attack():
    raise LookupError("no attack: the control student's honest part")
