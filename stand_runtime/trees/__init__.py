"""Draft trees: the static tree (``tree``), tree files (``tree_io``), tree families (``families``), sizing
a family for this machine (``tree_choice``), and one step's drafted token tree (``draft``)."""
