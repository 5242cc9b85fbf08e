#!/usr/bin/perl
# Argument decoding and error precedence as libpve-rs-perl 0.13.0 (perlmod + serde) has them, against
# a real server: a table of argument kinds x value kinds with upstream's texts, then one subtest per
# class of difference from upstream that once existed, then a near tie end to end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

my $STATIC = 'PVE::RS::ResourceScheduling::Static';
my $DYNAMIC = 'PVE::RS::ResourceScheduling::Dynamic';

# Accepted by upstream and by the drop-in; accepted by upstream but refused by crs-bridge on
# purpose (product decision 4: values upstream computes NaN or nonsense from), with a message
# naming the field.
use constant { OK => 'accepted', REFUSED => 'refused by crs-bridge' };

sub type_error { return "error: invalid type: $_[0], expected $_[1]\n" }

# The value kinds, each made afresh for every call (perlmod judges a scalar by its body type,
# so a value must not be used as a string or number by the test before it is passed).
my @VALUES = (
    [ undef => sub { undef } ],
    [ number => sub { 5 } ],
    [ string => sub { 'abc' } ],
    [ 'float-looking string' => sub { '1.5' } ],
    [ 'array ref' => sub { [] } ],
    [ 'hash ref' => sub { {} } ],
    [ inf => sub { 9**9**9 } ],
    [ nan => sub { my $inf = 9**9**9; $inf - $inf } ],
    [ 'huge (1e30)' => sub { 1e30 } ],
    [ negative => sub { -1 } ],
);

my $s = $STATIC->new();
$s->add_node($_, 4, GiB) for qw(n1 n2);
my $names = $STATIC->new();    # where names are added
$s->add_service('vm:1', { stats => { maxcpu => 1, maxmem => GiB }, running => 1, 'current-node' => 'n1' });
my $serial = 0;
my $STATS = sub { { maxcpu => 1, maxmem => GiB } };

# serde's text for each value kind where $what is expected and the value is of another type:
# the default of every row, which then lists what it accepts or says otherwise. (perlmod gives
# a visitor that prefers a string, a record or a list undef as an Option's none; the numeric
# rows say "unit value".)
sub wrong_types {
    my ($what) = @_;
    return (
        undef => type_error('Option value', $what),
        number => type_error('integer `5`', $what),
        string => type_error('string "abc"', $what),
        'float-looking string' => type_error('string "1.5"', $what),
        'array ref' => type_error('sequence', $what),
        'hash ref' => type_error('map', $what),
        inf => type_error('floating point `inf`', $what),
        nan => type_error('floating point `NaN`', $what),
        'huge (1e30)' => type_error('floating point `1000000000000000000000000000000.0`', $what),
        negative => type_error('integer `-1`', $what),
    );
}

# usize: perlmod reads Perl's SvIV of a number, which wraps past 2**63.
my $WRAPPED = "error: invalid value: integer `-1`, expected usize\n";

# Argument kind => [ how to pass a value there, { value kind => upstream's answer } ].
my @KINDS = (
    [ 'string (String: add_node name)', sub { $names->add_node($_[0], 4, GiB) },
        { wrong_types('a string'), string => OK, 'float-looking string' => OK } ],
    [ '&str (contains_node)', sub { $s->contains_node($_[0]) },
        { wrong_types('a borrowed string'), string => OK, 'float-looking string' => OK } ],
    [ 'usize (add_node maxcpu)', sub { $s->add_node('u' . ++$serial, $_[0], GiB) }, {
        wrong_types('usize'),
        undef => type_error('unit value', 'usize'),
        number => OK,
        inf => $WRAPPED,
        nan => REFUSED,    # upstream reads 0 cores
        'huge (1e30)' => $WRAPPED,
        negative => $WRAPPED,
    } ],
    [ 'f64 (maxcpu of start stats)', sub { $s->score_nodes_to_start_service({ maxcpu => $_[0], maxmem => GiB }) }, {
        wrong_types('f64'),
        undef => type_error('unit value', 'f64'),
        number => OK,
        map({ $_ => REFUSED } 'inf', 'nan', 'huge (1e30)', 'negative'),
    } ],
    [ 'bool (running)', sub {
        $s->add_service('b' . ++$serial, { stats => $STATS->(), running => $_[0], 'current-node' => 'n1' });
    }, {
        map({ $_ => OK } 'undef', 'number', 'inf', 'nan', 'huge (1e30)', 'negative'),    # Perl's truth
        string => "error: expected bool value\n",
        'float-looking string' => "error: expected bool value\n",
        'array ref' => type_error('sequence', 'a boolean'),
        'hash ref' => type_error('map', 'a boolean'),
    } ],
    [ 'struct record (the resource itself)', sub { $s->add_service('r' . ++$serial, $_[0]) }, {
        wrong_types('struct PveResource'),
        'array ref' => "error: invalid length 0, expected struct PveResource with 4 elements\n",
        'hash ref' => "error: missing field `stats`\n",
    } ],
    [ 'struct record as an array ([stats, value]: value as running)', sub {
        $s->add_service('a' . ++$serial, [ $STATS->(), $_[0] ]);
    }, {
        map({ $_ => "error: invalid length 2, expected struct PveResource with 4 elements\n" }
            'undef', 'number', 'inf', 'nan', 'huge (1e30)', 'negative'),
        string => "error: expected bool value\n",
        'float-looking string' => "error: expected bool value\n",
        'array ref' => type_error('sequence', 'a boolean'),
        'hash ref' => type_error('map', 'a boolean'),
    } ],
    [ 'list of strings (nodes of a candidate)', sub {
        $s->score_best_balancing_migration_candidates([ { leader => 'vm:1', resources => ['vm:1'], nodes => $_[0] } ], 1);
    }, { wrong_types('a sequence'), 'array ref' => OK } ],
    [ 'list element (a target node)', sub {
        $s->score_best_balancing_migration_candidates([ { leader => 'vm:1', resources => ['vm:1'], nodes => [ $_[0] ] } ], 1);
    }, {
        wrong_types('a string'),
        string => REFUSED,    # an unknown target: upstream scores the move as if the guest vanished
        'float-looking string' => REFUSED,
    } ],
    [ 'candidate entry', sub { $s->score_best_balancing_migration_candidates([ $_[0] ], 1) }, {
        wrong_types('struct CompactMigrationCandidate'),
        'array ref' => "error: invalid length 0, expected struct CompactMigrationCandidate with 3 elements\n",
        'hash ref' => "error: missing field `leader`\n",
    } ],
);

subtest 'argument kinds x value kinds' => sub {
    for my $kind (@KINDS) {
        my ($name, $call, $expected) = @$kind;
        for my $value (@VALUES) {
            my ($label, $make) = @$value;
            my $want = $expected->{$label} // die "no expectation for $name x $label\n";
            my $got = error_of { $call->($make->()) };
            if ($want eq OK) {
                is($got, '', "$name x $label: accepted");
            } elsif ($want eq REFUSED) {
                like($got, qr/^Invalid params: \S+: .+\n\z/, "$name x $label: refused by crs-bridge, naming the field");
            } else {
                is($got, $want, "$name x $label");
            }
        }
    }
};

subtest '1. undef where a string, a record or a list element is expected' => sub {
    my $d = $DYNAMIC->new();
    $d->add_node('n1', { cpu => 0.5, maxcpu => 4, mem => GiB, maxmem => 8 * GiB });
    my $stats = { cpu => 0.1, maxcpu => 1.0, mem => GiB, maxmem => GiB };
    is(error_of { $d->add_resource('vm:161', { stats => $stats, running => 0, 'current-node' => undef }) },
        "error: invalid type: Option value, expected a string\n", 'current-node undef');
    is(error_of { $d->add_resource('vm:161', undef) },
        "error: invalid type: Option value, expected struct PveResource\n", 'the record undef');
    is(error_of { $d->add_resource(undef, { stats => $stats, running => 0, 'current-node' => 'n1' }) },
        "error: invalid type: Option value, expected a string\n", 'the sid undef');
    is(error_of { $d->add_resource('vm:161', { stats => undef, running => 0, 'current-node' => 'n1' }) },
        "error: invalid type: Option value, expected struct DynamicResourceStats\n", 'the stats undef');
    is(error_of { $d->add_resource('vm:161', { stats => { %$stats, mem => undef }, running => 0, 'current-node' => 'n1' }) },
        "error: invalid type: unit value, expected usize\n", 'an integer undef stays a unit value');
    is(error_of { $d->add_resource('vm:161', { stats => $stats, running => undef, 'current-node' => 'n1', 'target-node' => undef }) },
        '', 'running undef is false, target-node undef is none');
    $d->add_resource('vm:2', { stats => $stats, running => 1, 'current-node' => 'n1' });
    for my $field (qw(nodes resources)) {
        my $candidate = { leader => 'vm:2', resources => ['vm:2'], nodes => ['n1'] };
        $candidate->{$field} = [ 'vm:2', undef ];
        is(error_of { $d->score_best_balancing_migration_candidates_topsis([$candidate], 1) },
            "error: invalid type: Option value, expected a string\n", "undef in a candidate's $field");
    }
};

subtest '2. &str parameters expect a borrowed string' => sub {
    my $d = $DYNAMIC->new();
    my @calls = (
        [ 'contains_node', sub { $s->contains_node($_[0]) } ],
        [ 'remove_node', sub { $s->remove_node($_[0]) } ],
        [ 'remove_service_usage', sub { $s->remove_service_usage($_[0]) } ],
        [ 'remove_resource', sub { $d->remove_resource($_[0]) } ],
        [ 'add_service_usage_to_node nodename', sub { $s->add_service_usage_to_node($_[0], 'vm:9', $STATS->()) } ],
        [ 'add_service_usage_to_node sid', sub { $s->add_service_usage_to_node('n1', $_[0], $STATS->()) } ],
    );
    for my $call (@calls) {
        my ($name, $code) = @$call;
        is(error_of { $code->(7) }, type_error('integer `7`', 'a borrowed string'), "$name: a number");
        is(error_of { $code->([]) }, type_error('sequence', 'a borrowed string'), "$name: an array ref");
        is(error_of { $code->(undef) }, type_error('Option value', 'a borrowed string'), "$name: undef");
    }
    is(error_of { $s->add_node(7, 1, 1) }, type_error('integer `7`', 'a string'), 'a String parameter says a string');
};

subtest '3. a positional record must carry every field' => sub {
    my $st = $STATIC->new();
    $st->add_node('node34', 8, 16 * GiB);
    my $before = $st->calculate_node_imbalance();
    is(error_of { $st->add_service('vm:254', [ { maxcpu => 0, maxmem => 2**30 }, 0, 'node34' ]) },
        "error: invalid length 3, expected struct PveResource with 4 elements\n", 'three of four elements');
    is($st->calculate_node_imbalance(), $before, 'no state change');
    is(error_of { $st->add_service('vm:254', [ [1.0], 0, 'node34', undef ]) },
        "error: invalid length 1, expected struct StaticResourceStats with 2 elements\n", 'a short positional stats record');
    is(error_of { $st->add_service('vm:254', [ { maxcpu => 0, maxmem => 2**30 }, 0, 'node34', undef, 'ignored' ]) }, '',
        'all four (the target undef), and more elements are ignored');
    is(error_of { $st->add_service('vm:254', [ { maxcpu => 0, maxmem => 2**30 }, 0, 'node34', undef ]) },
        "resource 'vm:254' already exists\n", 'added once, by the call that was whole');
};

subtest '4. integers beyond upstream\'s range where a usize is expected' => sub {
    my $st = $STATIC->new();
    my %wrapped = (
        '2**63 (an unsigned integer)' => [ 9223372036854775808, '-9223372036854775808' ],
        '2**64 - 1 (an unsigned integer)' => [ 18446744073709551615, '-1' ],
        '1e19 (a float)' => [ 1e19, '-8446744073709551616' ],
        '1e30' => [ 1e30, '-1' ],
        'inf' => [ 9**9**9, '-1' ],
        '-inf' => [ -9**9**9, '-9223372036854775808' ],
    );
    for my $label (sort keys %wrapped) {
        my ($value, $text) = @{ $wrapped{$label} };
        is(error_of { $st->add_node('n', 4, $value) }, "error: invalid value: integer `$text`, expected usize\n",
            "maxmem $label");
        is(error_of { $s->score_best_balancing_migration_candidates([], $value) },
            "error: invalid value: integer `$text`, expected usize\n", "limit $label");
    }
    for my $value (2**62, 9223372036854775807) {
        like(error_of { $st->add_node('n', 4, $value) }, qr/^Invalid params: maxmem: .*\n\z/,
            "maxmem $value: upstream takes it, crs-bridge's own bound says no");
    }
    is_deeply($s->score_best_balancing_migration_candidates([], 9223372036854775807), [], 'a limit of 2**63 - 1 is fine');
    is_deeply($st->list_nodes(), [], 'nothing was added');
};

subtest '5. an invalid present field beats a missing one' => sub {
    my $st = $STATIC->new();
    $st->add_node('n1', 4, GiB);
    is(error_of { $st->add_service('vm:148', { stats => { maxcpu => 1, maxmem => GiB }, 'current-node' => 0.1 }) },
        type_error('floating point `0.1`', 'a string'), 'current-node 0.1, running missing');
    is(error_of { $st->add_service('vm:148', { running => 1, stats => { maxmem => 'x' } }) },
        type_error('string "x"', 'usize'), 'inside stats too');
    # Two invalid fields: the first in the hash's own order (what perlmod walks) wins.
    my %resource = (stats => 'bad', running => 'bad', 'current-node' => 7);
    my %error = (
        stats => type_error('string "bad"', 'struct StaticResourceStats'),
        running => "error: expected bool value\n",
        'current-node' => type_error('integer `7`', 'a string'),
    );
    my ($first) = keys %resource;
    is(error_of { $st->add_service('vm:148', \%resource) }, $error{$first}, "three invalid: '$first' first, as keys has it");
};

subtest '6. where upstream fails anyway, its error wins' => sub {
    my $st = $STATIC->new();
    $st->add_node($_, 4, 4 * GiB) for qw(n1 n2);
    $st->add_service('vm:1', { stats => $STATS->(), running => 1, 'current-node' => 'n1' });
    my @list = (
        { leader => 'vm:1', resources => ['vm:1'], nodes => [qw(n1 n2)] },    # n1: its own node
        { leader => 'vm:415', resources => ['vm:415'], nodes => ['n2'] },
    );
    for my $method (qw(score_best_balancing_migration_candidates score_best_balancing_migration_candidates_topsis)) {
        is(error_of { $st->$method(\@list, 1) }, "leader 'vm:415' is not present in the cluster usage\n",
            "$method: an unknown leader later beats a target equal to its source");
        like(error_of { $st->$method([ $list[0] ], 1) }, qr/^Invalid params: candidates\[0\]\.nodes\[0\]: .*source node/,
            "$method: alone, the target is still refused");
    }
    is(error_of { $st->score_best_balancing_migration_candidates([ { leader => '', resources => [''], nodes => ['n2'] } ], 1) },
        "leader '' is not present in the cluster usage\n", 'an empty leader');
    is(error_of {
        $st->score_best_balancing_migration_candidates([ { %{ $list[0] }, nodes => [''] }, $list[1] ], 1);
    }, "leader 'vm:415' is not present in the cluster usage\n", 'an empty target, then an unknown leader');
    my $service = sub { { stats => { maxcpu => $_[0], maxmem => GiB }, running => 1, 'current-node' => 'nowhere' } };
    is(error_of { $st->add_service('', $service->(1)) }, "current node for resource '' does not exist\n",
        'an empty sid on an unknown node');
    is(error_of { $st->add_service('vm:2', $service->(-1)) }, "current node for resource 'vm:2' does not exist\n",
        'negative cores on an unknown node');
    is(error_of { $st->add_service('vm:1', { %{ $service->(-1) }, 'current-node' => 'n1' }) },
        "resource 'vm:1' already exists\n", 'negative cores for a known sid');
    is(error_of { $st->add_service('vm:2', $service->(9**9**9)) }, "current node for resource 'vm:2' does not exist\n",
        'infinite cores (which JSON cannot carry) on an unknown node');
    is(error_of { $st->add_service_usage_to_node('nowhere', 'vm:3', { maxcpu => -9**9**9, maxmem => 1 }) },
        "current node for resource 'vm:3' does not exist\n", 'legacy add of infinite cores to an unknown node');
    like(error_of { $st->add_service('vm:2', { %{ $service->(9**9**9) }, 'current-node' => 'n2' }) },
        qr/^Invalid params: service\.stats\.maxcpu: Input should be a finite number\n\z/,
        'infinite cores where upstream would add them: refused');
    my $d = $DYNAMIC->new();
    $d->add_node('n1', { cpu => 1, maxcpu => 4, mem => GiB, maxmem => 8 * GiB });
    my $nan = 9**9**9 - 9**9**9;
    is(error_of { $d->add_node('n1', { cpu => $nan, maxcpu => 4, mem => GiB, maxmem => 8 * GiB }) },
        "node 'n1' already exists\n", 'NaN usage for a known node');
    is(error_of { $st->add_node('n1', 0, GiB) }, "node 'n1' already exists\n", 'zero cores for a known node');
    is(error_of { $st->add_service_usage_to_node('', 'vm:3', $STATS->()) }, "current node for resource 'vm:3' does not exist\n",
        'legacy add to an empty node name');
    like(error_of { $st->add_service('vm:2', { %{ $service->(-1) }, 'current-node' => 'n2' }) },
        qr/^Invalid params: service\.stats\.maxcpu: /, 'where upstream would add it, crs-bridge still refuses');
    is_deeply($st->list_nodes(), [qw(n1 n2)], 'no node added');
    is(error_of { $st->add_service('vm:2', { stats => $STATS->(), running => 1, 'current-node' => 'n2' }) }, '',
        'no resource added');
};

subtest '7. a one-byte difference decides TOPSIS, in every node order' => sub {
    # vm:101 moves 1 byte, vm:100 12,345: vm:101 leaves the lower memory load. Upstream's crate ranks
    # it first with this imbalance (raw) in every node order; a tolerance once took the two as tied.
    my @nodes = (
        [ n0 => 0.0, 96, 0, 1073741824 ],
        [ n1 => 0.504, 1, 521860546560, 1629715955711 ],
        [ n2 => 3.8987625101428405, 4, 710109298688, 1099511627776 ],
        [ n3 => 74.43942559889999, 96, 1544382191852, 2176114825314 ],
        [ n4 => 110.359, 256, 0, 274877906944 ],
        [ n5 => 112.25922096223273, 128, 1152204721865, 2139982207100 ],
        [ n6 => 6.502310926828734, 8, 2284847104, 8589934592 ],
    );
    for my $rotation (0 .. $#nodes) {
        my $d = $DYNAMIC->new();
        for my $node (@nodes[ $rotation .. $#nodes ], @nodes[ 0 .. $rotation - 1 ]) {
            my ($name, $cpu, $maxcpu, $mem, $maxmem) = @$node;
            $d->add_node($name, { cpu => $cpu, maxcpu => $maxcpu, mem => $mem, maxmem => $maxmem });
        }
        for my $guest ([ 'vm:100' => 12345 ], [ 'vm:101' => 1 ]) {
            $d->add_resource($guest->[0], { stats => { cpu => 0.0, maxcpu => 0.0, mem => $guest->[1], maxmem => 0 },
                running => 1, 'current-node' => 'n0' });
        }
        my $best = $d->score_best_balancing_migration_candidates_topsis(
            [ map { { leader => $_, resources => [$_], nodes => ['n4'] } } qw(vm:100 vm:101) ], 1);
        is_deeply([ map { [ $_->{migration}{sid}, $_->{imbalance} ] } @$best ], [ [ 'vm:101', 0.566012358337451 ] ],
            "nodes from n$rotation on: upstream's answer");
    }
};

done_testing();
