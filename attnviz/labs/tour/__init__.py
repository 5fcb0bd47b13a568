"""The guided tour: the attention tutorial's eight sections in order, each a step beside its live demonstration.

:mod:`attnviz.labs.tour.steps` says which steps there are and which page each comes from; the numbers each step
states are computed by the labs the pages use (this package adds only what no page had: see its modules).
"""
