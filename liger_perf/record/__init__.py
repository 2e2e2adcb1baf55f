"""The record of the trials: the types of a request and a result (``schema``), the notebook contract
(``notebook``), the history's paths, numbering and locks (``store``), and reading it back (``history``)."""
