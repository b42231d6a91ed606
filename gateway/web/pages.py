"""(placeholder: filled in by its issue)"""

routes: list = []
