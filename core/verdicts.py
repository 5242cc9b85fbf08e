"""The words an explanation (:mod:`core.explain`) and a plan (:mod:`core.planner`) answer with,
and the HA manager's checks a plan applies by default.

Kept apart from both so that naming them (in the wire schema, say) does not load either.
"""

#: Reasons (machine-readable); all but MIGRATE say why nothing would move.
MIGRATE = "migrate"
THRESHOLD_REACHED = "threshold-reached"
NO_CANDIDATES = "no-candidates"
NO_IMPROVEMENT = "no-improvement"
MARGIN_NOT_REACHED = "margin-not-reached"
#: What an explanation concludes: MIGRATE, or why nothing would move.
EXPLAIN_REASONS = (MIGRATE, THRESHOLD_REACHED, NO_CANDIDATES, NO_IMPROVEMENT, MARGIN_NOT_REACHED)

#: Why a plan ends: the reasons above that stop a round, and the step limit.
MAX_STEPS = "max-steps"
STOP_REASONS = (THRESHOLD_REACHED, NO_CANDIDATES, NO_IMPROVEMENT, MARGIN_NOT_REACHED, MAX_STEPS)

#: The HA manager's defaults for auto-rebalancing (ha-manager.md 7.4): act above this imbalance...
HA_THRESHOLD = 0.3
#: ...and only for a relative improvement of at least this much.
HA_MARGIN = 0.1
#: The planner's default step limit.
PLAN_MAX_STEPS = 10
