"""For each language: a program that reads two integers from stdin and prints their sum, and one that does not
compile (or, for a language without a compile step, does not parse)."""

from __future__ import annotations

#: language -> (a program printing the sum of the two integers on stdin, a program with a syntax error)
PROGRAMS: dict[str, tuple[str, str]] = {
    "python": ("a, b = map(int, input().split())\nprint(a + b)\n", "def f(:\n"),
    "pytest": (
        "def test_sum():\n    assert 3 + 4 == 7\n",  # pytest keeps stdin from tests
        "def test_f(:\n",
    ),
    "bash": ("read a b\necho $((a + b))\n", "if then fi (\n"),
    "c": (
        '#include <stdio.h>\nint main(void){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);return 0;}\n',
        "int main(void){ return x }\n",
    ),
    "cpp": (
        "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n",
        "int main(){ std::cout << }\n",
    ),
    "java": (
        "import java.util.*;\npublic class Main { public static void main(String[] x) {"
        " Scanner s = new Scanner(System.in); int a = s.nextInt(), b = s.nextInt(); System.out.println(a + b); } }\n",
        "public class Main { public static void main(String[] x) { int a = ; } }\n",
    ),
    "go": (
        'package main\nimport "fmt"\nfunc main() { var a, b int; fmt.Scan(&a, &b); fmt.Println(a + b) }\n',
        "package main\nfunc main() { x := }\n",
    ),
    "rust": (
        "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s)"
        ".unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();"
        ' println!("{}", v[0] + v[1]); }\n',
        'fn main() { let x: i32 = "a"; }\n',
    ),
    "nodejs": (
        "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\nconsole.log(a + b);\n",
        "function (\n",
    ),
    "typescript": (
        "const s: string = require('fs').readFileSync(0, 'utf8');\n"
        "const [a, b]: number[] = s.trim().split(/\\s+/).map(Number);\nconsole.log(a + b);\n",
        "const n: number = 'not a number';\n",
    ),
    "ruby": ("a, b = gets.split.map(&:to_i)\nputs a + b\n", "def f(\n"),
    "php": (
        '<?php\n[$a, $b] = array_map("intval", explode(" ", trim(fgets(STDIN))));\necho $a + $b, "\\n";\n',
        "<?php\nfunction (\n",
    ),
    "lua": ("local a, b = io.read('n', 'n')\nprint(math.floor(a + b))\n", "local = 1\n"),
    "R": (
        "x <- scan(file('stdin'), what = integer(), quiet = TRUE)\ncat(sum(x), '\\n', sep = '')\n",
        "f <- function( {\n",
    ),
    "perl": ("my ($a, $b) = split ' ', <STDIN>;\nprint $a + $b, \"\\n\";\n", "my $x = ;\n"),
    "racket": (
        "#lang racket/base\n(define a (read))\n(define b (read))\n(displayln (+ a b))\n",
        "#lang racket/base\n(define (f x)\n",
    ),
    "csharp": (
        "using System;\nclass P { static void Main() { var p = Console.ReadLine().Split(' ');"
        " Console.WriteLine(int.Parse(p[0]) + int.Parse(p[1])); } }\n",
        "class P { static void Main() { int x = ; } }\n",
    ),
    "kotlin": (
        'fun main() { val (a, b) = readLine()!!.trim().split(" ").map { it.toInt() }; println(a + b) }\n',
        'fun main() { val x: Int = "a" }\n',
    ),
    "scala": (
        "object Main { def main(args: Array[String]): Unit = {"
        ' val Array(a, b) = scala.io.StdIn.readLine().trim.split(" ").map(_.toInt); println(a + b) } }\n',
        'object Main { def main(args: Array[String]): Unit = { val x: Int = "a" } }\n',
    ),
    "D": (
        'import std.stdio;\nvoid main() { int a, b; readf(" %d %d", &a, &b); writeln(a + b); }\n',
        "void main() { int x = ; }\n",
    ),
    "D_ut": (
        "import std.stdio;\nunittest { assert(3 + 4 == 7); }\n"
        'void main() { int a, b; readf(" %d %d", &a, &b); writeln(a + b); }\n',
        "unittest { assert(1 == ); }\nvoid main() {}\n",
    ),
}
