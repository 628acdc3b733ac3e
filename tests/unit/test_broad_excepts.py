"""Every broad `except` in product code keeps its cause and says why it is broad.

A broad handler (`except:`, `except Exception`, `except BaseException`, or a tuple holding
one of them) catches bugs as well as the failures it was written for, so it must not lose
them: its body re-raises (a bare `raise`, or `raise ... from`), calls a logger (`logger.*`,
`log.*`, `logging.*`, ... with a logging method), or hands the caught exception on by name
to code that raises or reports it (another thread, a probe's answer). And the `except` line
carries a `# broad: <why>` comment, so a reader sees it is on purpose. Anything else is
narrowed to what can really occur there. Read with `ast`, never imported.
"""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Sequence

from source_scan import REPO, nodes, product_files

TOPS = ("dlaas", "services")
BROAD = frozenset({"Exception", "BaseException"})
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
)


def _names(node: ast.expr | None) -> list[str]:
    """The class names an `except` clause names (`mod.Error` -> `Error`)."""
    if node is None:
        return ["BaseException"]  # a bare `except:`
    if isinstance(node, ast.Tuple):
        return [name for elt in node.elts for name in _names(elt)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def is_broad(handler: ast.ExceptHandler) -> bool:
    return any(name in BROAD for name in _names(handler.type))


def _body_nodes(handler: ast.ExceptHandler):
    """Every node of the handler's body, but not of functions defined there (they may never run)."""
    todo: list[ast.AST] = list(handler.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def _is_logger(node: ast.expr) -> bool:
    """`logger`, `log`, `logging`, `self._log`, `LOG`: a name that says it logs."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "log" in name.lower()


def keeps_cause(handler: ast.ExceptHandler) -> bool:
    """The body re-raises, logs, or hands the caught exception on by name."""
    for node in _body_nodes(handler):
        if isinstance(node, ast.Raise) and (node.exc is None or node.cause is not None):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS
            and _is_logger(node.func.value)
        ):
            return True
        if (
            handler.name
            and isinstance(node, ast.Name)
            and node.id == handler.name
            and isinstance(node.ctx, ast.Load)
        ):
            return True
    return False


def _comment_on(lines: Sequence[str], lineno: int) -> str:
    """The comment on line `lineno` of a module, where a logical line starts (an `except`
    clause's does): only that logical line is tokenized, not the whole module."""
    rest = iter(lines[lineno - 1 :])
    for tok in tokenize.generate_tokens(lambda: next(rest, "")):
        if tok.type == tokenize.COMMENT and tok.start[0] == 1:
            return tok.string
        if tok.type == tokenize.NEWLINE:
            break
    return ""


def find_unexplained(source: str, module_nodes: Sequence[ast.AST] | None = None) -> list[int]:
    """Lines of broad handlers that lose their cause or carry no `# broad:` comment
    (`module_nodes`: the source's nodes, when the caller has it parsed already)."""
    found = module_nodes if module_nodes is not None else ast.walk(ast.parse(source))
    broad = [n for n in found if isinstance(n, ast.ExceptHandler) and is_broad(n)]
    lines = source.splitlines(keepends=True)
    return sorted(
        node.lineno
        for node in broad
        if not keeps_cause(node) or "broad" not in _comment_on(lines, node.lineno).lower()
    )


def test_every_broad_handler_keeps_its_cause_and_says_why() -> None:
    bad = [
        f"{path.relative_to(REPO)}:{line}"
        for path in product_files(TOPS)
        for line in find_unexplained(path.read_text(), nodes(path))
    ]
    assert not bad, (
        "broad except that neither re-raises, logs nor hands the exception on, or has no "
        "'# broad: <why>' comment on its line (narrow it, or log and explain): " + ", ".join(bad)
    )


# The checker's own tests: each planted violation is found, each good form passes.

GOOD = [
    "try:\n    f()\nexcept Exception:  # broad: the loop must live\n    log.exception('x')\n",
    "try:\n    f()\nexcept BaseException:  # broad: cleanup, then re-raised\n    undo()\n    raise\n",
    "try:\n    f()\nexcept Exception as exc:  # broad: wrapped\n    raise Wrapped() from exc\n",
    "try:\n    f()\nexcept Exception as exc:  # broad: for the caller's thread\n    q.put(exc)\n",
    "try:\n    f()\nexcept Exception:  # broad: logged\n    self._logger.warning('x')\n",
    "try:\n    f()\nexcept (OSError, ValueError):\n    pass\n",  # narrow: no rule
    "try:\n    f()\nexcept docker.errors.APIError:\n    pass\n",
]

BAD = [
    "try:\n    f()\nexcept Exception:  # broad: silent\n    pass\n",  # silent
    "try:\n    f()\nexcept:  # broad: silent\n    return None\n",  # bare, silent
    "try:\n    f()\nexcept Exception:\n    log.exception('x')\n",  # logs, no comment
    "try:\n    f()\nexcept BaseException as e:  # noqa: BLE001\n    raise\n",  # no 'broad'
    "try:\n    f()\nexcept (ValueError, Exception):  # broad: tuple\n    pass\n",
    "try:\n    f()\nexcept Exception:  # broad: new error drops cause\n    raise Other()\n",
    "try:\n    f()\nexcept Exception:  # broad: prints\n    print('x')\n",
    # a logger call inside a nested function may never run
    "try:\n    f()\nexcept Exception:  # broad: x\n    def g():\n        log.error('x')\n",
]


def test_checker_accepts_the_good_forms() -> None:
    for source in GOOD:
        assert find_unexplained(source) == [], source


def test_checker_finds_each_planted_violation() -> None:
    for source in BAD:
        assert find_unexplained(source) == [3], source


def test_checker_names_the_line_in_a_longer_module() -> None:
    source = "import x\n\n\ndef f():\n    try:\n        g()\n    except Exception:\n        pass\n"
    assert find_unexplained(source) == [7]
