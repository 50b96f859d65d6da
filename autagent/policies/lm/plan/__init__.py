"""The memory plan of the LM policy's training on a GPU (``autagent plan``; ``autagent train`` checks it
first): :mod:`.arithmetic` the bytes per rank in each phase of a GRPO step, :mod:`.shapes` the model's
shapes it counts from, :mod:`.terms` where each item comes from (counted, or fitted on the runs on
record), :mod:`.report` the table, the verdict on a card and the nearest settings that fit."""
