"""The stdio problems of the default task stream: small stdin/stdout programs with a reference solution each, in the
shape ``rollbox tasks import stdio`` reads (written out and imported like any such file)."""

from __future__ import annotations

from typing import Any

__all__ = ["STDIO_PROBLEMS"]


def _cases(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"input": i, "output": o} for i, o in pairs]


STDIO_PROBLEMS: list[dict[str, Any]] = [
    {
        "id": "stdio-sum",
        "statement": "The first line holds n; the second, n integers. Print their sum.",
        "tests": _cases(
            ("3\n1 2 3\n", "6\n"),
            ("1\n-5\n", "-5\n"),
            ("4\n10 -10 7 0\n", "7\n"),
            ("0\n\n", "0\n"),
            ("5\n100 200 300 400 500\n", "1500\n"),
            ("2\n-3 -4\n", "-7\n"),
        ),
        "solutions": ["n = int(input())\nvalues = input().split()\nprint(sum(int(v) for v in values[:n]))\n"],
    },
    {
        "id": "stdio-max-subarray",
        "statement": "The first line holds n >= 1; the second, n integers. Print the largest sum of a non-empty "
        "run of consecutive integers.",
        "tests": _cases(
            ("5\n-2 1 -3 4 -1\n", "4\n"),
            ("3\n-1 -2 -3\n", "-1\n"),
            ("6\n2 -1 2 3 -9 4\n", "6\n"),
            ("1\n7\n", "7\n"),
            ("8\n-2 -3 4 -1 -2 1 5 -3\n", "7\n"),
            ("4\n1 2 3 4\n", "10\n"),
        ),
        "solutions": [
            "input()\nbest = None\nrun = 0\nfor x in map(int, input().split()):\n    run = max(x, run + x)\n"
            "    best = run if best is None else max(best, run)\nprint(best)\n"
        ],
    },
    {
        "id": "stdio-reverse-words",
        "statement": "Each line of the input holds words separated by spaces. Print each line with its words in "
        "reverse order, separated by one space.",
        "tests": _cases(
            ("hello world\n", "world hello\n"),
            ("a b c\nd e\n", "c b a\ne d\n"),
            ("one\n", "one\n"),
            ("the quick brown fox\n", "fox brown quick the\n"),
            ("x y\ny x\nz\n", "y x\nx y\nz\n"),
        ),
        "solutions": ["import sys\nfor line in sys.stdin:\n    print(' '.join(reversed(line.split())))\n"],
    },
    {
        "id": "stdio-primes",
        "statement": "The first line holds q; each of the next q lines an integer n >= 0. For each, print YES if n "
        "is prime, else NO.",
        "tests": _cases(
            ("3\n2\n4\n17\n", "YES\nNO\nYES\n"),
            ("4\n0\n1\n9\n97\n", "NO\nNO\nNO\nYES\n"),
            ("2\n25\n29\n", "NO\nYES\n"),
            ("1\n7919\n", "YES\n"),
            ("3\n3\n49\n121\n", "YES\nNO\nNO\n"),
        ),
        "solutions": [
            "def prime(n):\n    if n < 2:\n        return False\n    d = 2\n    while d * d <= n:\n"
            "        if n % d == 0:\n            return False\n        d += 1\n    return True\n\n\n"
            "for _ in range(int(input())):\n    print('YES' if prime(int(input())) else 'NO')\n"
        ],
    },
    {
        "id": "stdio-fizzbuzz",
        "statement": "Read n. For i from 1 to n print Fizz if 3 divides i, Buzz if 5 does, FizzBuzz if both do, "
        "else i; one a line.",
        "tests": _cases(
            ("5\n", "1\n2\nFizz\n4\nBuzz\n"),
            ("1\n", "1\n"),
            ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz\n"),
            ("3\n", "1\n2\nFizz\n"),
            ("10\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n"),
        ),
        "solutions": [
            "for i in range(1, int(input()) + 1):\n    word = ('Fizz' if i % 3 == 0 else '') + "
            "('Buzz' if i % 5 == 0 else '')\n    print(word or i)\n"
        ],
    },
    {
        "id": "stdio-gcd",
        "statement": "Each line holds two non-negative integers a and b, not both 0. Print gcd(a, b) for each line.",
        "tests": _cases(
            ("12 18\n", "6\n"),
            ("7 13\n0 5\n", "1\n5\n"),
            ("100 75\n81 27\n", "25\n27\n"),
            ("9 0\n", "9\n"),
            ("48 180\n17 17\n1 1000000\n", "12\n17\n1\n"),
        ),
        "solutions": [
            "import sys\nfor line in sys.stdin:\n    if line.strip():\n        a, b = map(int, line.split())\n"
            "        while b:\n            a, b = b, a % b\n        print(a)\n"
        ],
    },
]
