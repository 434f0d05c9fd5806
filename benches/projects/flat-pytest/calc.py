"""A flat-layout module: calc.py next to tests/, no package, no src/."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b
