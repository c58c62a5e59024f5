"""What the tools' Python tests share: expect() prints each failed check and counts it in `fails`."""
fails = 0


def expect(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)
