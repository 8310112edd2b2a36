"""Draft trees: the static tree (``tree``), tree files and families (``tree_io``), sizing a family for this
machine (``tree_choice``), and one step's drafted token tree (``draft``)."""
