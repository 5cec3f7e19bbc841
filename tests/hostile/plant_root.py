def _attack():
    # The sandbox's own folders (/, /etc, /dev, the parents of the bound venv): run as an ordinary account, a
    # nursery's jobs share one tmpfs there, and its folders were that account's, the job's uid too. A file left
    # there (an /etc/ld.so.preload) would run in every later classmate's processes.
    import os
    planted = []
    own = {"/tmp", os.environ.get("HOME"), "/dev/shm"}  # the job's own: the venv's parent is /tmp in a clone there
    for folder in ("/", "/etc", "/dev", "/run", os.path.dirname(os.path.dirname("$grader")), "/home"):
        if folder in own or folder.startswith("/tmp/"):  # under the job's own /tmp: nobody else's
            continue
        try:
            with open(os.path.join(folder, "planted-by-$me"), "w") as f:
                f.write("left for the next job")
            planted.append(folder)
        except OSError:
            pass
    if planted:
        return planted
    raise PermissionError("no folder of the sandbox outside the job's own /tmp, HOME and /dev/shm is writable")
