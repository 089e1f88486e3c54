"""Control-affine plants, each defined once in sympy (see base.py).

Data flows one way: systems -> training -> compiler -> cbfsim; nothing here imports them.
"""
from .acc import acc
from .base import ControlAffineSystem, Controller
from .bicycle import bicycle, steering_angle
from .double_integrator import double_integrator
from .inverted_pendulum import inverted_pendulum
from .registry import SYSTEM_NAMES, get_system
from .unicycle import unicycle
from .van_der_pol import van_der_pol

__all__ = [
    "ControlAffineSystem", "Controller", "get_system", "SYSTEM_NAMES",
    "van_der_pol", "bicycle", "inverted_pendulum", "acc", "unicycle", "double_integrator",
    "steering_angle",
]
