#!/usr/bin/perl
# The adds' common case is recognised and rendered directly by CRSBridge::Records (a resource:
# in resource_args; a dynamic node's stats: node_stats_param); it must journal exactly what the
# exact decoders (CRSBridge::Records::resource, dynamic_node_stats) journal for the same values,
# and leave everything else to them, so that their error texts stay the only ones.

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
    my $resource = \&CRSBridge::Records::resource;
    *CRSBridge::Records::resource = sub { $exact++; goto &$resource };
}

# The object's journal.
sub journal { return [ @{ CRSBridge::Scheduler::_state($_[0])->{mirror}->journal } ] }

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
        { cpu => unpack('d>', pack('H*', '8000000000000000')), maxcpu => 4, mem => 0, maxmem => 1 },    # -0.0
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

# Node adds and resource adds in between: journaled in order, listed in order, and the server agrees.
subtest 'node adds: journaled and listed in their order' => sub {
    my @steps = (
        [ add_node => 'n1' ], [ add_resource => 'vm:1', 'n1' ], [ add_node => "n\x{fc}2" ],
        [ add_resource => 'vm:2', "n\x{fc}2", 'n1' ], [ add_node => 'n"3' ], [ add_resource => 'vm:3', 'n"3' ],
        [ add_node => 'n4' ],
    );
    my %stats = (static => [ 16, 64 * GiB ], dynamic => [ { cpu => 10 / 3, maxcpu => 16, mem => 3 * GiB, maxmem => 64 * GiB } ]);
    for my $mode (qw(static dynamic)) {
        my $class = "PVE::RS::ResourceScheduling::" . ucfirst $mode;
        my $add = $mode eq 'static' ? 'add_service' : 'add_resource';
        my $resource_stats = $mode eq 'static' ? { maxcpu => 1.5, maxmem => GiB }
            : { cpu => 0.25, maxcpu => 1.5, mem => GiB / 2, maxmem => GiB };
        my $usage = $class->new();
        for my $step (@steps) {
            my ($op, $name, @placement) = @$step;
            if ($op eq 'add_node') {
                $usage->add_node($name, map { ref $_ ? {%$_} : $_ } @{ $stats{$mode} });
            } else {
                $usage->$add($name, { stats => {%$resource_stats}, running => 1, 'current-node' => $placement[0],
                    defined $placement[1] ? ('target-node' => $placement[1]) : () });
            }
        }
        is_deeply([ map { /^\["(\w+)",("(?:[^"\\]|\\.)*")/ ? [ $1, $2 ] : $_ } @{ journal($usage) } ],
            [ map { [ $_->[0] eq 'add_node' ? 'add_node' : $add, CRSBridge::Codec::json_str($_->[1]) ] } @steps ],
            "$mode: every add journaled, in order");
        is_deeply($usage->list_nodes, [ "n1", "n\x{fc}2", 'n"3', 'n4' ], "$mode: the nodes in their order");
        is_deeply(server_call($usage, 'list_nodes'), $usage->list_nodes, '... as the server has them');
    }
};

subtest 'node adds: failures take the exact path, with its messages' => sub {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node('a', 8, GiB);
    is(error_of { $usage->add_node('a', 8, GiB) }, "node 'a' already exists\n", 'a duplicate of a batched node');
    $usage->add_node('b', 8, GiB);
    is(error_of { $usage->add_node('b', 4, GiB) }, "node 'b' already exists\n", '... also right after it');
    like(error_of { $usage->add_node('', 8, GiB) }, qr/^Invalid params: /, "an empty name: the server's message");
    like(error_of { $usage->add_node('c', 0, GiB) }, qr/^Invalid params: .*maxcpu/, 'no cores: the same');
    is(error_of { $usage->add_node('c', '8', GiB) }, qq(error: invalid type: string "8", expected usize\n),
        'a decoding error');
    is(error_of { $usage->add_node(7, 8, GiB) }, "error: invalid type: integer `7`, expected a string\n",
        '... of the name first');
    $usage->add_service('vm:1', { stats => { maxcpu => 1, maxmem => GiB }, running => 1, 'current-node' => 'b' });
    is($usage->contains_node('c'), 0, 'the refused ones are not there');
    is_deeply($usage->list_nodes, [qw(a b)], '... the others are, in order');
    $usage->remove_node('a');
    $usage->add_node('a', 8, GiB);
    is_deeply($usage->list_nodes, [qw(b a)], 'removed and added again');
    is_deeply([ grep {/add_node/} @{ journal($usage) } ],
        [ '["add_node","a",8,1073741824]', '["add_node","b",8,1073741824]', '["add_node","a",8,1073741824]' ],
        'the accepted ones journaled once each');
    is(error_of { PVE::RS::ResourceScheduling::Static::add_node({}, 'x', 8, GiB) },
        "value blessed into PVE::RS::ResourceScheduling did not contain its declared magic pointer\n",
        'a bad invocant dies as before');
};

# Candidate lists have their common shape written out in CRSBridge::Records::candidates_param;
# its rendering must be the exact decoder's, candidate by candidate, whatever mix a list holds.
subtest "candidates: the written-out rendering is the exact decoder's" => sub {
    my $exact_calls = 0;
    no warnings 'redefine';
    my $exact_one = \&CRSBridge::Records::_candidate_exact;
    local *CRSBridge::Records::_candidate_exact = sub { $exact_calls++; goto &$exact_one };
    my $exact = sub { '[' . join(',', map { $exact_one->($_) } @{ $_[0] }) . ']' };
    my @plain = map {
        my $home = 'n' . (1 + $_ % 3);
        { leader => "vm:$_", resources => ["vm:$_"], nodes => [ grep { $_ ne $home } qw(n1 n2 n3) ] }
    } 1 .. 6;
    push @plain, { leader => 'ct:7', resources => [ 'vm:8', 'ct:7' ], nodes => [] };
    my $list = [ @plain, { leader => 'vm:9', resources => ['vm:9'], nodes => [qw(n1 n2)] } ];
    is(CRSBridge::Records::candidates_param($list), $exact->($list), 'plain candidates');
    is($exact_calls, 0, '... all written out');
    my $number = 5;
    my @odd = (
        { leader => 'vm:"q"', resources => ['vm:"q"'], nodes => ['n1'] },    # escapes
        { leader => '5', resources => [$number], nodes => ['n1'] },    # decoding error below
        { leader => "vm:\x{e9}", resources => ["vm:\x{e9}"], nodes => ['n1'] },    # Latin-1, no UTF-8 flag
        { leader => 'vm:10', resources => ['vm:10'], nodes => ['n1 ', '9n'] },
        bless({ leader => 'vm:11', resources => ['vm:11'], nodes => ['n1'] }, 'Other'),
        { leader => 'vm:12', resources => \['vm:12'], nodes => ['n1'] },
        [ 'vm:13', ['vm:13'], ['n2'] ],
        { leader => 'vm:14', resources => ['vm:14'], nodes => ['n2'], extra => 1 },
        { leader => 'vm:15', resources => [ 'vm:15', 'vm:16' ], nodes => [ 'n1', "n\0" ] },
    );
    my @decoded = (1, undef, 0, 1, 1, 1, 1, 0, 1);    # how many of each list the exact decoder renders
    for my $i (0 .. $#odd) {
        next if $i == 1;
        my $with = [ @plain[ 0 .. 2 ], $odd[$i], @plain[ 3 .. 5 ] ];
        $exact_calls = 0;
        my $json = CRSBridge::Records::candidates_param($with);
        is($exact_calls, $decoded[$i], "odd candidate $i among plain ones: decoded exactly, or written out");
        is($json, $exact->($with), '... rendered as the exact decoder renders it');
    }
    my $flagged = [ @plain, { leader => "vm:\x{263a}", resources => ["vm:\x{263a}"], nodes => ['n1'] } ];
    is(CRSBridge::Records::candidates_param($flagged), $exact->($flagged), 'a name with the UTF-8 flag');
    my $wrong = [ @plain[ 0 .. 2 ], $odd[1], { leader => 'vm:x', resources => ['vm:x'], nodes => [ {} ] } ];
    is(error_of { CRSBridge::Records::candidates_param($wrong) }, error_of { $exact->($wrong) },
        'the first invalid candidate dies as in the exact decoder');
    like(error_of { CRSBridge::Records::candidates_param($wrong) }, qr/integer `5`/, '... naming the number');
    for my $leader (undef, '', 7) {
        my $with = [ @plain, { leader => $leader, resources => ['vm:1'], nodes => ['n1'] } ];
        my $expected = eval { $exact->($with) } // $@;
        is(eval { CRSBridge::Records::candidates_param($with) } // $@, $expected,
            'leader ' . ($leader // 'undef') . ': as the exact decoder has it (' . substr((split /\n/, $expected)[0], 0, 60) . ')');
    }
    my $nul = [ @plain[ 0 .. 2 ], { leader => 'vm:20', resources => ['vm:20'], nodes => ["n1\0n2"] } ];
    is(CRSBridge::Records::candidates_param($nul), $exact->($nul),
        'a name holding NUL, after a list of the names it joins: the one name');
    my $surrogate = [ @plain, { leader => 'vm:1', resources => ['vm:1'], nodes => [ "n\x{d800}" ] } ];
    like(error_of { CRSBridge::Records::candidates_param($surrogate) }, qr/U\+D800/, 'a surrogate dies');
    my $surrogate_first = [ @$surrogate, $odd[1] ];
    is(error_of { CRSBridge::Records::candidates_param($surrogate_first) }, error_of { $exact->($surrogate_first) },
        '... before an invalid candidate after it, as in the exact decoder');
};

subtest 'names that are not plain, in any of the three places: the exact path' => sub {
    # The plain path judges the three names' characters together: each place must still count.
    my @odd = ('n"q', "n\tt", "n\x{263a}");
    for my $odd (@odd) {
        for my $place (qw(sid current target)) {
            my $usage = static_cluster();
            $usage->add_node($odd, 64, 1024 * GiB);
            my %service = (stats => { maxcpu => 1, maxmem => GiB }, running => 1, 'current-node' => 'n1');
            my $sid = $place eq 'sid' ? $odd : 'vm:1';
            $service{'current-node'} = $odd if $place eq 'current';
            $service{'target-node'} = $odd if $place eq 'target';
            $exact = 0;
            is(error_of { $usage->add_service($sid, \%service) }, '', "$place " . quotemeta($odd) . ': added');
            is($exact, 1, '... decoded exactly');
            my $json = CRSBridge::Codec::json_str($odd);
            like(journal($usage)->[-1], qr/\Q$json\E/, '... and journaled with the name as JSON writes it');
        }
    }
};

sub static_cluster_with {
    my ($service, @sids) = @_;
    my $usage = static_cluster();
    $usage->add_service($_, {%$service}) for @sids;
    return $usage->calculate_node_imbalance;
}

done_testing();
