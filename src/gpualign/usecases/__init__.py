"""What gpualign does, as functions below the command line: each takes typed inputs (where the nodes come from, the
ledgers, the policy and the rules) and returns a typed result, saying nothing itself. `cli/` parses flags, calls one
of them and renders; the fleet report calls the same ones."""
