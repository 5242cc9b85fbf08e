#!/usr/bin/perl
# The adds' common case is decoded and rendered by a fast path written out for speed
# (CRSBridge::Scheduler::_resource_adder; a dynamic node's stats: CRSBridge::Records::
# node_stats_param); it must journal exactly what the exact decoders (CRSBridge::Records::
# resource_param, dynamic_node_stats) journal for the same values, and leave everything else
# to them, so that their error texts stay the only ones.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use CRSBridge::Records;
use CRSBridge::Args qw(MAX_BYTES);
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

# Count the resources that went through the exact decoders.
my $exact = 0;
{
    no warnings 'redefine';
    my $resource_param = \&CRSBridge::Records::resource_param;
    *CRSBridge::Records::resource_param = sub { $exact++; goto &$resource_param };
    *CRSBridge::Scheduler::resource_param = \&CRSBridge::Records::resource_param;
}

# The object's journal (any method, CRSBridge::Scheduler::_state first, hands the adds collected
# so far to it).
sub journal { return [ @{ CRSBridge::Connection::journal_entries(CRSBridge::Scheduler::_state($_[0])) } ] }

my @nodes = ('n1', 'n2', "n\x{fc}3");    # a name above ASCII needs no escape in JSON

sub static_cluster {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node($_, 64, 1024 * GiB) for @nodes;
    return $usage;
}

sub dynamic_cluster {
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    $usage->add_node($_, { cpu => 1.5, maxcpu => 64, mem => GiB, maxmem => 1024 * GiB }) for @nodes;
    return $usage;
}

# Stats the HA manager may pass: integral and fractional floats, integers, zero, bounds.
my @static_stats = (
    { maxcpu => 4.0, maxmem => 4 * GiB },    # 4 * GiB: a float (GiB is 1024**3)
    { maxcpu => 4, maxmem => 2**40 },
    { maxcpu => 0.5, maxmem => 0 },
    { maxcpu => 1 / 3, maxmem => 123456789 },
    { maxcpu => 0, maxmem => 1 },
    { maxcpu => 2**53, maxmem => 2**50 + 1 },    # crs-bridge's largest core count
);
my @dynamic_stats = map {
    { cpu => $_->{maxcpu} / 4, maxcpu => $_->{maxcpu}, mem => int($_->{maxmem} / 3), maxmem => $_->{maxmem} }
} @static_stats;

# The same resources, once as plain values (the fast path) and once with `running` behind a
# reference (which perlmod follows, as the exact decoders do, and the fast path leaves alone).
sub resources {
    my ($stats) = @_;
    my @list;
    for my $i (0 .. $#$stats) {
        my $running = (1, 0, !!1, !!0)[ $i % 4 ];
        my %placement = ('current-node' => $nodes[ $i % 3 ]);
        $placement{'target-node'} = $nodes[ ($i + 1) % 3 ] if $i % 2;    # every other one is moving
        push @list, [ "vm:$i", { stats => $stats->[$i], running => $running, %placement } ];
        push @list, [ "ct:\x{e9}$i", { stats => { %{ $stats->[$i] } }, running => $running, %placement } ];
    }
    return @list;
}

for my $case (
    [ 'static', \&static_cluster, 'add_service', \@static_stats ],
    [ 'dynamic', \&dynamic_cluster, 'add_resource', \@dynamic_stats ],
) {
    my ($mode, $cluster, $add, $stats) = @$case;
    subtest "$mode: the fast path journals what the exact decoders journal" => sub {
        my ($fast, $slow) = ($cluster->(), $cluster->());
        my @resources = resources($stats);
        $exact = 0;
        $fast->$add($_->[0], $_->[1]) for @resources;
        is($exact, 0, 'plain values take the fast path');
        $slow->$add($_->[0], { %{ $_->[1] }, running => \($_->[1]{running} ? 1 : 0) }) for @resources;
        is($exact, scalar @resources, 'a reference takes the exact path');
        is_deeply(journal($fast), journal($slow), 'the same journal entries');
        is(scalar(grep {/"target-node":"/} @{ journal($fast) }), @resources / 2, '... moving resources among them');
        is(scalar(grep {/"target-node"/} @{ journal($fast) }), @resources / 2, '... stationary ones without a target');
        is($fast->calculate_node_imbalance, $slow->calculate_node_imbalance, 'the server agrees');
    };
}

# Core counts as the HA manager reads them (a measured usage has all 17 digits): the fast path
# writes them with sprintf(JSON_NUM), integral ones as integers; the text must be the exact
# decoders' (json_num), and read back as the same double.
subtest 'core counts: the fast path writes what json_num writes' => sub {
    my @cores = (0.1, 1 / 3, 0.7123456789012345, 15.184, 2**-1074, 1e-7, 123456.789, 2**52 + 0.5, 0, 7, 8.0, 2**53);
    for my $case ([ 'static', \&static_cluster, 'add_service' ], [ 'dynamic', \&dynamic_cluster, 'add_resource' ]) {
        my ($mode, $cluster, $add) = @$case;
        my ($fast, $slow) = ($cluster->(), $cluster->());
        $exact = 0;
        for my $i (0 .. $#cores) {
            my $stats = $mode eq 'static' ? { maxcpu => $cores[$i], maxmem => GiB }
                : { cpu => $cores[$i], maxcpu => $cores[$i], mem => 0, maxmem => GiB };
            $fast->$add("vm:$i", { stats => {%$stats}, running => 1, 'current-node' => 'n1' });
            $slow->$add("vm:$i", { stats => { map { ($_ => \$stats->{$_}) } keys %$stats }, running => 1,
                'current-node' => 'n1' });
        }
        is($exact, scalar @cores, "$mode: the referenced ones decoded exactly, the plain ones not");
        my @entries = @{ journal($fast) }[ -@cores .. -1 ];
        is_deeply(\@entries, [ @{ journal($slow) }[ -@cores .. -1 ] ], "$mode: the same journal entries");
        my @read = map { /"maxcpu":([^,}]+)/ ? $1 : 'none' } @entries;
        is_deeply([ map { unpack('H*', pack('d>', $_)) } @read ], [ map { unpack('H*', pack('d>', $_)) } @cores ],
            "$mode: each reads back as the same double");
        is_deeply([ grep { /[.e]/ } @read[ -4 .. -1 ] ], [], "$mode: integral ones as integers");
    }
};

subtest 'dynamic node stats: the fast path journals what the exact decoders journal' => sub {
    my $decoded = 0;
    no warnings 'redefine';
    my $decode = \&CRSBridge::Records::dynamic_node_stats;
    local *CRSBridge::Records::dynamic_node_stats = sub { $decoded++; goto &$decode };
    my @stats = (
        { cpu => 1.5, maxcpu => 64, mem => GiB, maxmem => 1024 * GiB },
        { cpu => 0, maxcpu => 1, mem => 0, maxmem => 1 },
        { cpu => 10 / 3, maxcpu => 31.7, mem => 2.5 * GiB, maxmem => 2**50 + 1 },    # usize truncates
        { cpu => 7, maxcpu => 8.0, mem => 3e9, maxmem => 4e9 },
        { cpu => 2**53, maxcpu => 2**53, mem => MAX_BYTES, maxmem => MAX_BYTES },    # the bounds
    );
    # The same stats with every value behind a reference (perlmod follows it; the fast path does not).
    my @referenced = map { my $s = $_; +{ map { ($_ => \$s->{$_}) } keys %$s } } @stats;
    my ($fast, $slow) = map { PVE::RS::ResourceScheduling::Dynamic->new() } 1 .. 2;
    $fast->add_node("n$_", $stats[$_]) for 0 .. $#stats;
    is($decoded, 0, 'plain values take the fast path');
    $slow->add_node("n$_", $referenced[$_]) for 0 .. $#stats;
    is($decoded, scalar @stats, 'references take the exact path');
    is_deeply(journal($fast), journal($slow), 'the same journal entries');
    is($fast->calculate_node_imbalance, $slow->calculate_node_imbalance, 'the server agrees');
    $decoded = 0;
    my %zero_cores = (cpu => 1, maxcpu => 0.5, mem => 1, maxmem => GiB);    # usize 0: refused
    like(error_of { $fast->add_node('z', {%zero_cores}) }, qr/^Invalid params: stats\.maxcpu: /,
        'a value the server refuses: its message');
    is(error_of { $slow->add_node('z', { map { ($_ => \$zero_cores{$_}) } keys %zero_cores }) },
        error_of { $fast->add_node('z', {%zero_cores}) }, '... the same by either path');
    is($decoded, 3, '... decoded exactly');
};

# MAX_BYTES (2**62 - 1) as a double is 2**62, so a double of 2**62 compares as equal to it:
# the fast paths must still leave it to the exact decoders, whose integer says it is too large.
subtest 'bytes of 2**62 held as a double: refused at the call, as by the exact path' => sub {
    my $bytes = 2**62;    # a double
    my %node = (cpu => 1, maxcpu => 8, mem => GiB, maxmem => 64 * GiB);
    my %stats = (cpu => 0.5, maxcpu => 1, mem => GiB, maxmem => GiB);
    my @cases = (
        [ 'a node\'s mem', sub { $_[0]->add_node('big', { %node, mem => $bytes }) }, qr/^Invalid params: stats\.mem: / ],
        [ 'a node\'s maxmem', sub { $_[0]->add_node('big', { %node, maxmem => $bytes }) },
            qr/^Invalid params: stats\.maxmem: / ],
        [ 'a resource\'s mem', sub {
            $_[0]->add_resource('vm:big', { stats => { %stats, mem => $bytes }, running => 1, 'current-node' => 'n1' });
        }, qr/^Invalid params: resource\.stats\.mem: / ],
    );
    for my $case (@cases) {
        my ($what, $add, $refusal) = @$case;
        my $usage = dynamic_cluster();
        like(error_of { $add->($usage) }, $refusal, "$what: the server's message at the call");
        is(error_of { $usage->calculate_node_imbalance }, '', '... and the object stays usable');
    }
};

subtest 'anything else takes the exact path, with its error texts' => sub {
    my $usage = static_cluster();
    my %service = (stats => { maxcpu => 1.0, maxmem => GiB }, running => 1, 'current-node' => 'n1');
    $exact = 0;
    is(error_of { $usage->add_service(100, {%service}) }, "error: invalid type: integer `100`, expected a string\n",
        'a sid that is a number');
    is(error_of { $usage->add_service('vm:1', { %service, 'current-node' => 1.5 }) },
        "error: invalid type: floating point `1.5`, expected a string\n", 'a node name that is a number');
    is(error_of { $usage->add_service('vm:1', { %service, 'target-node' => ['n2'] }) },
        "error: invalid type: sequence, expected a string\n", 'a target node that is a list');
    is(error_of { $usage->add_service('vm:1', { %service, stats => { maxcpu => '1', maxmem => GiB } }) },
        qq(error: invalid type: string "1", expected f64\n), 'cores as a plain string');
    is(error_of { $usage->add_service('vm:1', { %service, stats => { maxcpu => 1.0, maxmem => -1 } }) },
        "error: invalid value: integer `-1`, expected usize\n", 'negative bytes');
    like(error_of { $usage->add_service('vm:1', { %service, stats => { maxcpu => 2**53 + 2, maxmem => 1 } }) },
        qr/^Invalid params: service\.stats\.maxcpu: /, 'cores over the bounds: the server says why');
    is($exact, 5, 'all of them decoded exactly (the sid that is a number dies before its resource is read)');
    $exact = 0;
    my $sid = 'vm:"quoted"';
    is(error_of { $usage->add_service($sid, {%service}) }, '', 'a sid that needs escapes');
    my $number = '42';
    my $used = $number + 0;    # a string Perl has used as a number: a string to perlmod
    is(error_of { $usage->add_service($number, {%service}) }, '', 'a string used as a number');
    is($exact, 1, '... the first decoded exactly, the second a plain string to perlmod too');
    my $rest = '{"stats":{"maxcpu":1,"maxmem":1073741824},"running":true,"current-node":"n1"}';
    is_deeply([ @{ journal($usage) }[ -2, -1 ] ],
        [ qq(["add_service","vm:\\"quoted\\"",$rest]), qq(["add_service","42",$rest]) ],
        '... and journaled as the fast path would');
    is(error_of { $usage->add_service('vm:1', {%service}) }, '', 'then a plain one');
    is(error_of { $usage->add_service('vm:1', {%service}) }, "resource 'vm:1' already exists\n",
        '... whose duplicate dies at the call');
    is(error_of { $usage->add_service('vm:2', { %service, 'current-node' => 'n9' }) },
        "current node for resource 'vm:2' does not exist\n", 'an unknown node too');
    is(error_of { $usage->add_service('vm:2', { %service, 'target-node' => 'n1' }) },
        "resource 'vm:2' has the same current and target node\n", 'a moving one with the same nodes too');
    is(error_of { $usage->add_service('vm:2', { %service, 'target-node' => 'n9' }) },
        "nodes for resource 'vm:2' do not exist\n", 'one moving to an unknown node too');
    is(error_of { $usage->add_service('vm:1', { %service, 'target-node' => 'n2' }) }, "resource 'vm:1' already exists\n",
        'a moving duplicate too');
    is(scalar(grep {/"vm:2"/} @{ journal($usage) }), 0, 'none of them journaled');
    is($usage->calculate_node_imbalance, static_cluster_with(\%service, 'vm:"quoted"', '42', 'vm:1'),
        'the server has what the client accepted');
};

sub static_cluster_with {
    my ($service, @sids) = @_;
    my $usage = static_cluster();
    $usage->add_service($_, {%$service}) for @sids;
    return $usage->calculate_node_imbalance;
}

done_testing();
