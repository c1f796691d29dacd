"""The parts of a CUDA kernel's name as nsys writes it: its namespaces, its function and its
parameters. Standard library only: the reader (``nsys``) names a kernel by its function where
the short name is lost, the analysis tells communication by all three parts."""

from __future__ import annotations

ANONYMOUS = "{anonymous}"  # an anonymous namespace: nsys writes <unnamed>, demanglers (anonymous namespace)

# The symbols an operator's name may end in that would otherwise read as brackets.
_OPERATOR_SYMBOLS = ("()", "[]", "->*", "->", "<<=", ">>=", "<=>", "<<", ">>", "<=", ">=", "<", ">")


def kernel_name_parts(name: str) -> tuple[str, str, str]:
    """(namespaces and function, function, parameters) of a kernel's name: of a demangled one
    (``void deep_ep::intranode::dispatch<(int)8>(int4 *, float *)`` gives
    ``deep_ep::intranode::dispatch``, ``dispatch``, ``int4 *, float *``) without its return
    type and template arguments, an anonymous namespace as ``{anonymous}``; a short name
    (``dispatch``) is its own function, with no namespaces and no parameters. Angle brackets
    inside parentheses (``(int)(8 >> 1)``, ``decltype(a->b)``), ``->`` and an operator's own
    symbols (``&operator<``) are no template brackets. A name that does not parse is taken
    whole as the function."""
    text = name.replace("<unnamed>", ANONYMOUS).replace("(anonymous namespace)", ANONYMOUS)
    angle = paren = 0
    head: list[str] = []
    params = ""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("operator", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = i + len("operator")
            j += text[j:j + 1] == " "
            symbol = next((s for s in _OPERATOR_SYMBOLS if text.startswith(s, j)), "")
            if angle == 0 and paren == 0:
                head.append(text[i:j + len(symbol)])
            i = j + len(symbol)
            continue
        if text.startswith("->", i):
            if angle == 0 and paren == 0:
                head.append("->")
            i += 2
            continue
        if ch == "(":
            if angle == 0 and paren == 0:
                params = text[i + 1:].rsplit(")", 1)[0]
                break
            paren += 1
        elif ch == ")":
            paren -= 1
            if paren < 0:
                return name, name, ""
        elif paren == 0 and ch == "<":
            angle += 1
        elif paren == 0 and ch == ">":
            angle -= 1
            if angle < 0:
                return name, name, ""
        elif angle == 0 and paren == 0:
            head.append(ch)
        i += 1
    if angle != 0 or paren != 0:
        return name, name, ""
    qualified = "".join(head).strip().split(" ")[-1]  # the return type, where shown, goes
    if not qualified:
        return name, name, ""
    return qualified, qualified.rsplit("::", 1)[-1], params


def kernel_function(name: str) -> str:
    """The function a kernel's (demangled) name names, as nsys's short name gives it
    (``dispatch`` of ``void deep_ep::intranode::dispatch<(int)8>(int)``)."""
    return kernel_name_parts(name)[1]
