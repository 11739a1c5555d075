"""Telling a script without `if __name__ == "__main__":` before torch's checkpoint process
starts: PROCESS-mode async saves start that process with multiprocessing's "spawn", which imports
the main script again; unguarded, the script's top level runs again in the child and blocks in
`dist.new_group` for ever. `check_main_guard` fails first, with a message saying what to add.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys

GUIDE = (
    "GCSCheckpointer(\"process\") starts torch's checkpoint process with multiprocessing's"
    ' "spawn", which imports your main script {script} again: put the training code under'
    ' `if __name__ == "__main__":` (e.g. `def main(): ...` then `if __name__ == "__main__":'
    ' main()`), or use GCSCheckpointer("thread")'
)


def _guards(tree: ast.Module) -> list[tuple[int, int]]:
    """Line spans of top-level `if __name__ == "__main__":` bodies."""
    spans = []
    for node in tree.body:
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and {ast.dump(test.left), ast.dump(test.comparators[0])}
            == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}
        ):
            spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.lineno))
    return spans


def unguarded_call_line(stack_frame) -> int | None:
    """The line of the main script's top level, among `stack_frame`'s callers, that runs outside
    an `if __name__ == "__main__":` body; None when guarded or when there is no script file."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not path.endswith(".py"):
        return None  # interactive, -c, or a frozen program: spawn re-runs nothing
    frame = stack_frame
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    if any(start <= line <= end for start, end in _guards(tree)):
        return None
    return line


def check_main_guard(stack_frame) -> None:
    """Raises RuntimeError when PROCESS mode would re-run an unguarded main script.

    Two cases: this is torch's spawned checkpoint process importing the script (its
    `__main__` is `__mp_main__`), or the script's top level calls us outside a guard.
    """
    frame = stack_frame
    while frame is not None:  # spawn runs the script as `__mp_main__` (runpy.run_path)
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            if multiprocessing.parent_process() is not None:
                script = frame.f_globals.get("__file__", "your script")
                raise RuntimeError(GUIDE.format(script=script) + " (raised in that process)")
        frame = frame.f_back
    line = unguarded_call_line(stack_frame)
    if line is not None:
        script = getattr(sys.modules.get("__main__"), "__file__", "")
        raise RuntimeError(GUIDE.format(script=f"{script} (line {line})"))
