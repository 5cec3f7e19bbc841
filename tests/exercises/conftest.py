def pytest_configure(config):
    config.addinivalue_line("markers", "load: a repeated run under CPU load (still part of `make test`)")
