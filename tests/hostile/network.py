def _attack():
    import socket
    with socket.create_connection(("127.0.0.1", $port), timeout=5) as s:
        s.sendall(b"HOSTILE $me: secrets for the hub")
    return "connected to 127.0.0.1:$port"
