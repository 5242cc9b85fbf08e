#!/usr/bin/perl
# The crs-bridge extras plan_rebalance and explain_migrations on both scheduler objects: the
# plan's first step is what select_best_balancing_migration picks, the imbalance never goes up
# (checked against an imbalance computed here from the planned placement), the options reach
# the server and bad ones die clearly, and planning never changes the object.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use List::Util qw(max);
use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

my %NODES = (    # name -> [maxcpu, maxmem, base cpu, base mem] (dynamic: measured base load)
    n1 => [ 16, 64 * GiB, 1.0, 4 * GiB ],
    n2 => [ 16, 64 * GiB, 0.5, 2 * GiB ],
    n3 => [ 8, 32 * GiB, 0.5, 2 * GiB ],
    n4 => [ 32, 128 * GiB, 1.0, 8 * GiB ],
);
my @NODE_NAMES = sort keys %NODES;

# Guests: sid -> [node, maxcpu, maxmem, cpu, mem]; most on n1, so the cluster is skewed.
my %GUESTS = map {
    my $i = $_;
    ("vm:$i" => [ $i <= 9 ? 'n1' : $i <= 11 ? 'n2' : 'n3', 1 + $i % 4, (2 + $i % 3) * GiB, 0.5 + ($i % 3), (1 + $i % 2) * GiB ])
} 1 .. 12;
my @SIDS = sort { substr($a, 3) <=> substr($b, 3) } keys %GUESTS;

# One bundle per guest, allowed on every other node; vm:1 and vm:2 form one bundle (affinity).
sub candidates {
    my ($placement) = @_;
    my @bundles = ({ leader => 'vm:1', resources => [ 'vm:1', 'vm:2' ], nodes => [ grep { $_ ne $placement->{'vm:1'} } @NODE_NAMES ] });
    for my $sid (@SIDS[ 2 .. $#SIDS ]) {
        push @bundles, { leader => $sid, resources => [$sid], nodes => [ grep { $_ ne $placement->{$sid} } @NODE_NAMES ] };
    }
    return \@bundles;
}

my %PLACEMENT = map { ($_ => $GUESTS{$_}[0]) } @SIDS;
my $CANDIDATES = candidates(\%PLACEMENT);

# A scheduler object of $mode holding the cluster with the guests placed as in $placement
# (added in sid order, moved ones last, as a remove and re-add would order them).
sub build {
    my ($mode, $placement) = @_;
    my $usage;
    if ($mode eq 'static') {
        $usage = PVE::RS::ResourceScheduling::Static->new();
        $usage->add_node($_, @{ $NODES{$_} }[ 0, 1 ]) for @NODE_NAMES;
    } else {
        $usage = PVE::RS::ResourceScheduling::Dynamic->new();
        my $measured = measured($placement);
        for my $name (@NODE_NAMES) {
            my ($maxcpu, $maxmem) = @{ $NODES{$name} };
            $usage->add_node($name, { cpu => $measured->{$name}[0], maxcpu => $maxcpu, mem => $measured->{$name}[1], maxmem => $maxmem });
        }
    }
    for my $sid (@SIDS) {
        my ($node, $maxcpu, $maxmem, $cpu, $mem) = @{ $GUESTS{$sid} };
        my $where = $placement->{$sid};
        if ($mode eq 'static') {
            $usage->add_service($sid, { stats => { maxcpu => $maxcpu, maxmem => $maxmem }, running => 1, 'current-node' => $where });
        } else {
            $usage->add_resource($sid, { stats => { cpu => $cpu, maxcpu => $maxcpu, mem => $mem, maxmem => $maxmem },
                running => 1, 'current-node' => $where });
        }
    }
    return $usage;
}

# Dynamic: the measured usage of each node, [cores, bytes]: base load plus its guests.
sub measured {
    my ($placement) = @_;
    my %load = map { ($_ => [ @{ $NODES{$_} }[ 2, 3 ] ]) } @NODE_NAMES;
    for my $sid (@SIDS) {
        $load{ $placement->{$sid} }[0] += $GUESTS{$sid}[3];
        $load{ $placement->{$sid} }[1] += $GUESTS{$sid}[4];
    }
    return \%load;
}

# The imbalance of a placement, computed here: static counts each guest at its limits,
# dynamic at its measured usage plus the node's base load.
sub expected_imbalance {
    my ($mode, $placement, $formula) = @_;
    my %sum = map { ($_ => [ 0, 0 ]) } @NODE_NAMES;
    if ($mode eq 'static') {
        for my $sid (@SIDS) {
            $sum{ $placement->{$sid} }[0] += $GUESTS{$sid}[1];
            $sum{ $placement->{$sid} }[1] += $GUESTS{$sid}[2];
        }
    } else {
        %sum = %{ measured($placement) };
    }
    my @nodes = map { [ $sum{$_}[0], $NODES{$_}[0], $sum{$_}[1], $NODES{$_}[1] ] } @NODE_NAMES;
    return reference_imbalance(\@nodes, $formula // 'raw');
}

sub close_to {
    my ($got, $expected, $name) = @_;
    cmp_ok(abs($got - $expected), '<', 1e-12, $name) or diag("got $got, expected $expected");
}

# Checks a plan's steps against the placement they produce, step by step; returns the placement.
sub check_steps {
    my ($mode, $plan, $formula) = @_;
    my %placement = %PLACEMENT;
    close_to($plan->{before}{imbalance}, expected_imbalance($mode, \%placement, $formula), 'before: the current imbalance');
    my $previous = $plan->{before}{imbalance};
    for my $i (0 .. $#{ $plan->{steps} }) {
        my $step = $plan->{steps}[$i];
        is($step->{'imbalance-before'}, $previous, "step $i starts where the last one ended");
        is($placement{ $step->{sid} }, $step->{'source-node'}, "step $i moves $step->{sid} from where it is");
        $placement{$_} = $step->{'target-node'} for @{ $step->{resources} };
        close_to($step->{'imbalance-after'}, expected_imbalance($mode, \%placement, $formula),
            "step $i: the imbalance of the placement it leaves");
        cmp_ok($step->{'imbalance-after'}, '<', $step->{'imbalance-before'}, "step $i lowers the imbalance");
        cmp_ok(($step->{'imbalance-before'} - $step->{'expected-imbalance'}) / $step->{'imbalance-before'}, '>=',
            $plan->{margin}, "step $i: by at least the margin (predicted)");
        $previous = $step->{'imbalance-after'};
    }
    is($plan->{after}{imbalance}, $previous, 'after: where the last step ended');
    return \%placement;
}

sub migration_of {
    my ($step) = @_;
    return { map { ($_ => $step->{$_}) } 'sid', 'source-node', 'target-node' };
}

for my $mode (qw(static dynamic)) {
    subtest "$mode: plan_rebalance with the HA manager's defaults" => sub {
        my $usage = build($mode, \%PLACEMENT);
        my $plan = $usage->plan_rebalance($CANDIDATES);
        is_deeply([ sort keys %$plan ],
            [ sort 'method', 'imbalance-formula', 'threshold', 'margin', 'max-steps', 'allow-repeat', 'steps',
                'stop-reason', 'stop-message', 'before', 'after' ], 'the documented keys');
        is_deeply([ @$plan{ 'method', 'imbalance-formula', 'threshold', 'margin', 'max-steps', 'allow-repeat' } ],
            [ 'bruteforce', 'raw', 0.3, 0.1, 10, 0 ], 'defaults: bruteforce, 0.3, 0.1, 10 steps, no repeats');
        ok(!ref $plan->{'allow-repeat'}, 'allow-repeat is a plain 0 or 1');
        cmp_ok(scalar @{ $plan->{steps} }, '>=', 2, 'several steps');
        is_deeply([ map { $_->{node} } @{ $plan->{after}{nodes} } ], \@NODE_NAMES, 'loads of every node, in node order');

        my $best = $usage->select_best_balancing_migration($CANDIDATES);
        is_deeply(migration_of($plan->{steps}[0]), $best->{migration}, 'step 1 is select_best_balancing_migration');
        is($plan->{steps}[0]{'expected-imbalance'}, $best->{imbalance}, '... with its imbalance');
        is($plan->{before}{imbalance}, $usage->calculate_node_imbalance, 'before: calculate_node_imbalance');

        check_steps($mode, $plan);
        my @sids = map { $_->{sid} } @{ $plan->{steps} };
        is(scalar(keys %{ { map { ($_ => 1) } @sids } }), scalar @sids, 'no bundle moves twice');
        like($plan->{'stop-reason'}, qr/^(threshold-reached|margin-not-reached|no-improvement|no-candidates|max-steps)$/,
            "stopped: $plan->{'stop-reason'}");
        like($plan->{'stop-message'}, qr/\S/, 'with a message');
        if ($plan->{'stop-reason'} eq 'threshold-reached') {
            cmp_ok($plan->{after}{imbalance}, '<=', 0.3, 'under the threshold');
        }
    };

    subtest "$mode: TOPSIS" => sub {
        my $usage = build($mode, \%PLACEMENT);
        my $plan = $usage->plan_rebalance($CANDIDATES, { method => 'topsis' });
        is($plan->{method}, 'topsis', 'method');
        my $best = $usage->select_best_balancing_migration_topsis($CANDIDATES);
        is_deeply(migration_of($plan->{steps}[0]), $best->{migration}, 'step 1 is select_best_balancing_migration_topsis');
        is($plan->{steps}[0]{'expected-imbalance'}, $best->{imbalance}, '... with its imbalance');
        check_steps($mode, $plan);
    };

    subtest "$mode: planning does not change the object" => sub {
        my $usage = build($mode, \%PLACEMENT);
        my $state = sub {
            return [ $usage->calculate_node_imbalance, $usage->score_best_balancing_migration_candidates($CANDIDATES, 50),
                $usage->list_nodes, server_call($usage, 'list_nodes') ];
        };
        my $before = $state->();
        my $plan = $usage->plan_rebalance($CANDIDATES, { max_steps => undef, allow_repeat => 1, threshold => 0 });
        cmp_ok(scalar @{ $plan->{steps} }, '>=', 2, 'a long plan');
        $usage->explain_migrations($CANDIDATES, { limit => 3 });
        is_deeply($state->(), $before, 'same imbalance, scores and nodes afterwards');
        is_deeply($usage->plan_rebalance($CANDIDATES, { max_steps => undef, allow_repeat => 1, threshold => 0 }), $plan,
            'planning again gives the same plan');
    };
}

subtest 'options' => sub {
    my $usage = build('static', \%PLACEMENT);
    my $full = $usage->plan_rebalance($CANDIDATES, { max_steps => undef });
    is($full->{'max-steps'}, undef, 'max_steps undef: no limit');
    cmp_ok(scalar @{ $full->{steps} }, '>=', 2, '... several steps');

    my $one = $usage->plan_rebalance($CANDIDATES, { max_steps => 1 });
    is(scalar @{ $one->{steps} }, 1, 'max_steps 1: one step');
    is($one->{'stop-reason'}, 'max-steps', '... stopped by the limit');
    is_deeply($one->{steps}[0], $full->{steps}[0], '... the same first step');
    is($one->{after}{imbalance}, $one->{steps}[0]{'imbalance-after'}, '... and the state after it');

    my $none = $usage->plan_rebalance($CANDIDATES, { threshold => 10 });
    is_deeply([ scalar @{ $none->{steps} }, $none->{'stop-reason'} ], [ 0, 'threshold-reached' ], 'threshold 10 (over any imbalance of these nodes): nothing to do');
    is_deeply($none->{after}, $none->{before}, '... the loads stay');
    my $margin = $usage->plan_rebalance($CANDIDATES, { margin => 0.99 });
    is_deeply([ scalar @{ $margin->{steps} }, $margin->{'stop-reason'} ], [ 0, 'margin-not-reached' ], 'margin 0.99: no move is good enough');
    is($usage->plan_rebalance([])->{'stop-reason'}, 'no-candidates', 'no candidates');

    my $repeat = $usage->plan_rebalance($CANDIDATES, { allow_repeat => 1, max_steps => undef, threshold => 0, margin => 0 });
    is($repeat->{'allow-repeat'}, 1, 'allow_repeat true is sent as true');
    my $no_repeat = $usage->plan_rebalance($CANDIDATES, { allow_repeat => 0, max_steps => undef, threshold => 0, margin => 0 });
    is($no_repeat->{'allow-repeat'}, 0, 'allow_repeat 0 as false');
    cmp_ok(scalar @{ $repeat->{steps} }, '>=', scalar @{ $no_repeat->{steps} }, 'repeats allow at least as many steps');
    cmp_ok($repeat->{after}{imbalance}, '<=', $no_repeat->{after}{imbalance}, '... and end at least as balanced');
    check_steps('static', $repeat);

    is($usage->plan_rebalance($CANDIDATES, { method => undef, threshold => undef })->{threshold}, 0.3,
        'an undef option counts as not given');
};

subtest 'bad options die with a clear message, the object stays usable' => sub {
    my $usage = build('dynamic', \%PLACEMENT);
    my $before = $usage->calculate_node_imbalance;
    is(error_of { $usage->plan_rebalance($CANDIDATES, { treshold => 0.2 }) },
        "crs-bridge: plan_rebalance: unknown option 'treshold' (known: allow_repeat, margin, max_steps, method, threshold)\n",
        'a misspelt option');
    is(error_of { $usage->explain_migrations($CANDIDATES, { max_steps => 1 }) },
        "crs-bridge: explain_migrations: unknown option 'max_steps' (known: limit, margin, method, threshold)\n",
        'a plan option for explain');
    like(error_of { $usage->plan_rebalance($CANDIDATES, [ threshold => 0.2 ]) },
        qr/^crs-bridge: plan_rebalance: the options must be a hash reference, got 'ARRAY\(0x[0-9a-f]+\)'\n\z/, 'not a hash');
    is(error_of { $usage->plan_rebalance($CANDIDATES, { threshold => '30%' }) },
        "crs-bridge: plan_rebalance: option 'threshold' must be a finite number, got '30%'\n", 'not a number');
    is(error_of { $usage->plan_rebalance($CANDIDATES, { margin => 9**9**9 }) },
        "crs-bridge: plan_rebalance: option 'margin' must be a finite number, got 'Inf'\n", 'infinite');
    like(error_of { $usage->plan_rebalance($CANDIDATES, { threshold => -0.1 }) },
        qr/^Invalid params: threshold: .*greater than or equal to 0\n\z/, 'a negative threshold: the server names it');
    like(error_of { $usage->plan_rebalance($CANDIDATES, { method => 'greedy' }) },
        qr/^Invalid params: method: .*'bruteforce' or 'topsis'\n\z/, 'an unknown method');
    like(error_of { $usage->plan_rebalance($CANDIDATES, { max_steps => 1.5 }) },
        qr/^Invalid params: max_steps: /, 'a fractional step limit');
    like(error_of { $usage->explain_migrations($CANDIDATES, { limit => 0 }) },
        qr/^Invalid params: limit: .*greater than or equal to 1\n\z/, 'explain limit 0');
    is(error_of { $usage->plan_rebalance() }, "missing required parameter: 'candidates'\n", 'arity');
    like(error_of { $usage->plan_rebalance([ { leader => 'vm:1', resources => ['vm:1'], nodes => ['n9'] } ]) },
        qr/\bn9\b/, 'an unknown target node: the message names it');
    is($usage->calculate_node_imbalance, $before, 'the object still works, unchanged');
};

subtest 'explain_migrations' => sub {
    my $usage = build('static', \%PLACEMENT);
    my $why = $usage->explain_migrations($CANDIDATES, { threshold => 0.3, margin => 0.1 });
    is($why->{reason}, 'migrate', 'over the threshold with a good move: migrate');
    is($why->{limit}, 1, 'limit 1 by default');
    my $best = $usage->select_best_balancing_migration($CANDIDATES);
    is_deeply([ $why->{chosen}[0]{migration}, $why->{chosen}[0]{imbalance} ], [ @$best{qw(migration imbalance)} ],
        'chosen: what select_best_balancing_migration picks');
    is($why->{current}{imbalance}, $usage->calculate_node_imbalance, 'current imbalance');
    my $expanded = 0;
    $expanded += @{ $_->{nodes} } for @$CANDIDATES;
    is($why->{'candidate-count'}, $expanded, 'every target of every bundle counted');
    my $source = $why->{chosen}[0]{source};
    cmp_ok($source->{after}{load}, '<', $source->{before}{load}, 'the source node gets lighter');

    my $top = $usage->explain_migrations($CANDIDATES, { limit => 2 });
    is_deeply([ map { [ $_->{migration}, $_->{imbalance} ] } @{ $top->{chosen} } ],
        [ map { [ $_->{migration}, $_->{imbalance} ] } @{ $usage->score_best_balancing_migration_candidates($CANDIDATES, 2) } ],
        'limit 2: the top two of score_best_balancing_migration_candidates');
    is_deeply([ @{ $top->{'runner-up'} }{qw(migration imbalance)} ],
        [ @{ $usage->score_best_balancing_migration_candidates($CANDIDATES, 3)->[2] }{qw(migration imbalance)} ],
        'the runner-up is the third');
    is_deeply([ @$top{qw(threshold margin)} ], [ undef, undef ], 'no threshold or margin given: not checked');

    my $topsis = $usage->explain_migrations($CANDIDATES, { method => 'topsis' });
    is_deeply($topsis->{chosen}[0]{migration}, $usage->select_best_balancing_migration_topsis($CANDIDATES)->{migration},
        'TOPSIS: what select_best_balancing_migration_topsis picks');
    ok(ref $topsis->{topsis} eq 'HASH' && @{ $topsis->{topsis}{criteria} }, '... with the TOPSIS reference points');

    is($usage->explain_migrations($CANDIDATES, { threshold => 10 })->{reason}, 'threshold-reached', 'threshold 10: no move');
    is($usage->explain_migrations([])->{reason}, 'no-candidates', 'no candidates');
};

subtest 'CRS_BRIDGE_IMBALANCE=raw: the object\'s formula' => sub {
    local $ENV{CRS_BRIDGE_IMBALANCE} = 'raw';
    my $usage = build('dynamic', \%PLACEMENT);
    my $plan = $usage->plan_rebalance($CANDIDATES, { max_steps => 3 });
    is($plan->{'imbalance-formula'}, 'raw', 'the plan uses it');
    check_steps('dynamic', $plan, 'raw');
    is($usage->explain_migrations($CANDIDATES)->{'imbalance-formula'}, 'raw', 'so does explain_migrations');
};

done_testing();
