def _attack():
    import hashlib, os
    with open("$course/submitted/$me/02_ddp_basics/02_ddp_basics.ipynb", "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    folder = "$course/graded/02_ddp_basics"
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "$me.json"), "w") as f:
        f.write($forged.replace("SHA", sha))
    return "wrote graded/$me.json"
