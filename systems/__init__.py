"""Control-affine plants, each defined once in sympy (see base.py).

Data flows one way: systems/ and compiler/ import nothing of ours; training/ imports both;
cbfsim/ imports all three.  Your own plant: subclass ``ControlAffineSystem`` and either
``register`` it or name it by import path ``package.module:ClassName`` (see registry.py).
"""
from .acc import acc
from .base import ControlAffineSystem, Controller, PeriodicCoordinateError
from .bicycle import bicycle, steering_angle
from .darboux import darboux
from .hi_ord8 import hi_ord8
from .obstacle_avoidance import obstacle_avoidance
from .double_integrator import double_integrator
from .dubins import dubins
from .inverted_pendulum import inverted_pendulum
from .point_robot import point_robot
from .registry import SYSTEM_NAMES, UnknownSystemError, available, get_system, register, system_origin, unregister
from .spacecraft import spacecraft
from .unicycle import unicycle
from .van_der_pol import van_der_pol

__all__ = [
    "ControlAffineSystem", "Controller", "get_system", "SYSTEM_NAMES", "UnknownSystemError", "available",
    "register", "system_origin", "unregister",
    "van_der_pol", "bicycle", "inverted_pendulum", "acc", "unicycle", "double_integrator",
    "darboux", "obstacle_avoidance", "spacecraft", "hi_ord8", "point_robot",
    "dubins", "PeriodicCoordinateError",
    "steering_angle",
]
