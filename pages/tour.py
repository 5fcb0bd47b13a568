"""Tour: the attention tutorial's eight sections, a step at a time, each a live demonstration on a trained model.

Everything is drawn by :func:`attnviz.app.tour.frame.tour_page` (the frame) and each step's view
(:mod:`attnviz.app.tour.views`); this file only runs it.
"""

from attnviz.app.tour.frame import tour_page

tour_page()
