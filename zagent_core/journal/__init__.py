"""The journal's vocabulary and its folds: the events, the narrow protocols the stores implement, and the session state folded from the events."""
