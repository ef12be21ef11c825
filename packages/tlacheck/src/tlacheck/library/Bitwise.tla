------------------------------ MODULE Bitwise ------------------------------
(* Operators of the TLA+ community module Bitwise on natural numbers,       *)
(* defined in TLA+ by recursion on the binary digits.                       *)
EXTENDS Naturals

RECURSIVE BitAnd(_, _), BitOr(_, _), BitXor(_, _), BitNot(_, _)

BitAnd(x, y) ==
    IF x = 0 \/ y = 0 THEN 0 ELSE 2 * BitAnd(x \div 2, y \div 2) + (x % 2) * (y % 2)

BitOr(x, y) ==
    IF x = 0 THEN y ELSE IF y = 0 THEN x
    ELSE 2 * BitOr(x \div 2, y \div 2) + (IF x % 2 = 1 \/ y % 2 = 1 THEN 1 ELSE 0)

BitXor(x, y) ==
    IF x = 0 THEN y ELSE IF y = 0 THEN x
    ELSE 2 * BitXor(x \div 2, y \div 2) + (IF x % 2 # y % 2 THEN 1 ELSE 0)

\* The complement of a within its own number of binary digits.
BitNot(a, bit) == IF a = 0 THEN 0 ELSE bit * (1 - a % 2) + BitNot(a \div 2, 2 * bit)

a & b == BitAnd(a, b)
a | b == BitOr(a, b)
a ^^ b == BitXor(a, b)
Not(a) == BitNot(a, 1)
shiftR(n, pos) == n \div (2 ^ pos)
shiftL(n, pos) == n * (2 ^ pos)
=============================================================================
