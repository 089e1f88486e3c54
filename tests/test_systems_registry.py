"""Plants from outside the package: registration, import paths, and what the card records."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import systems
from compiler.errors import CbfsimError

CART = Path(__file__).resolve().parent.parent / "examples" / "own_plant" / "cart.py"   # the worked example's plant


@pytest.fixture
def cart_module(tmp_path, monkeypatch):
    shutil.copy(CART, tmp_path / "my_cart_plant.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_cart_plant"
    sys.modules.pop("my_cart_plant", None)
    systems.unregister("cart")


def test_a_plant_defined_outside_the_package_resolves_by_import_path(cart_module):
    plant = systems.get_system(f"{cart_module}:Cart", drag=0.25)
    assert plant.name == "cart" and plant.params.drag == 0.25
    assert np.array_equal(plant.f(np.array([0.0, 2.0])), np.array([2.0, -0.5]))
    assert systems.system_origin(f"{cart_module}:Cart") == "import"
    assert systems.get_system(f"{cart_module}:cart").params.drag == 0.5     # a factory works too


def test_register_works_as_a_decorator_and_lists_the_plant_as_registered(cart_module):
    import importlib
    module = importlib.import_module(cart_module)
    assert systems.register("cart")(module.Cart) is module.Cart
    assert systems.available()["cart"] == "registered" and systems.available()["van_der_pol"] == "builtin"
    assert systems.get_system("cart", p_max=2.0).params.p_max == 2.0
    with pytest.raises(ValueError, match="already registered"):
        systems.register("cart", module.cart)
    with pytest.raises(ValueError, match="built-in"):
        systems.register("bicycle", module.cart)


@pytest.mark.parametrize("name, message", [
    ("no_such_plant", "unknown system 'no_such_plant'"),
    ("no_such_module_xyz:Cart", "cannot import module 'no_such_module_xyz'"),
    ("systems.base:NoSuchClass", "has no 'NoSuchClass'"),
    ("systems.base:Definition", "is not a systems.ControlAffineSystem subclass"),
])
def test_an_unknown_system_is_one_clear_error_in_the_tree(name, message):
    with pytest.raises(CbfsimError) as info:
        systems.get_system(name)
    assert isinstance(info.value, KeyError) and message in str(info.value) and "\n" not in str(info.value)


def test_the_model_card_records_the_import_path_and_its_origin(cart_module):
    from training.artifacts import build_card
    from training.config import TrainConfig
    cfg = TrainConfig(system=f"{cart_module}:Cart", hidden=[8])
    system = cfg.build_system()
    card = build_card(cfg, system, cfg.resolve(system), training={})
    assert card.system == f"{cart_module}:Cart" and card.system_origin == "import"
    from training.model_card import ModelCard
    again = ModelCard.from_json(card.to_json())
    assert systems.get_system(again.system, **again.system_params).name == "cart"
