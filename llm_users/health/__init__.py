"""The load generator watching itself: self-check, loop-lag trace, gc and heap tuning, idle work.

What a saturated or disturbed client would do to the numbers is measured here and said in the
outputs, so a figure is never trusted blindly.
"""
