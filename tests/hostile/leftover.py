def _attack():
    import os, sys
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "HOSTILE-LEFTOVER"])
        os._exit(0)
    os.waitpid(pid, 0)
    return "left a process behind (double fork, setsid)"
