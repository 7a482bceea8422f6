"""docs/python.md's calls exist as written: every method it calls on a model is the hub
interface's, and takes the arguments the page gives it (bound to its signature)."""

import ast
import inspect
import re

import pytest
from pages import ROOT

from longformer_fs.hub.char_lm import CharLMHubInterface
from longformer_fs.hub.encoder import LongformerHubInterface
from longformer_fs.hub.led import LEDHubInterface

PAGE = ROOT / "docs" / "python.md"
# The page's variable names for each kind of model.
INTERFACES = {"model": LongformerHubInterface, "led": LEDHubInterface, "lm": CharLMHubInterface}


def calls():
    found = []
    for block in re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in (*INTERFACES, "longformer_fs"):
                    found.append((owner.id, node.func.attr, len(node.args), [k.arg for k in node.keywords]))
    return found


CALLS = calls()


def test_the_page_calls_each_kind_of_model():
    assert {owner for owner, *_ in CALLS} == {*INTERFACES, "longformer_fs"} and len(CALLS) >= 20


@pytest.mark.parametrize("owner,method,positional,keywords", CALLS, ids=[f"{c[0]}.{c[1]}" for c in CALLS])
def test_each_call_binds_to_the_interface(owner, method, positional, keywords):
    import longformer_fs

    target = longformer_fs if owner == "longformer_fs" else INTERFACES[owner]
    assert hasattr(target, method), f"{owner}.{method} does not exist"
    signature = inspect.signature(getattr(target, method))
    parameters = list(signature.parameters)
    if owner != "longformer_fs" and parameters[:1] == ["self"]:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    signature.bind(*range(positional), **dict.fromkeys(keywords))
