"""The guided tour's app side: the frame that walks a reader through :data:`attnviz.labs.tour.steps.STEPS`
(:mod:`.frame`), one view per step (:mod:`.basics`, :mod:`.models`, :mod:`.pitfalls`, ...), and the start-up
computation that lets every step draw without a forward pass (:mod:`.cache`). :mod:`.context` is what they share.
"""
