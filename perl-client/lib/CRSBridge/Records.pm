package CRSBridge::Records;

# The binding's input records (binding.md section 2.1): decoded as upstream decodes them and
# rendered as the JSON the server takes. The common shape (plain numbers and plain names, as the
# HA manager passes them) is recognised and rendered directly (a resource: by plain_resource; a
# dynamic node's stats: in node_stats_param; candidates: in candidates_param); anything else goes
# through the exact decoders of CRSBridge::Args, which also produce upstream's error messages.
# A whole argument is decoded before any value is checked against crs-bridge's bounds, as
# upstream reports decoding errors only.
#
# A plain name is a string (not a number, not a reference), not empty, needing no JSON escapes,
# without Perl's UTF-8 flag (so without characters UTF-8 cannot carry): arg_string accepts it as
# it is, and it is rendered as "$name".

use strict;
use warnings;

use Exporter 'import';
use Scalar::Util ();
use CRSBridge::Args qw(
    arg_usize arg_f64 arg_string arg_opt_string arg_bool arg_struct arg_string_list
    out_of_bounds_cores out_of_bounds_bytes finite_problem plain_number MAX_BYTES MAX_CORES
);
use CRSBridge::Codec qw(json_str json_num json_int json_str_list JSON_NUM);

our @EXPORT_OK = qw(
    static_stats_param dynamic_stats_param node_stats_param plain_resource resource_args candidates_param
    candidates_list
);

BEGIN {
    warnings->unimport('experimental::builtin') if $] >= 5.036;
    *_number = \&plain_number;
    *_bool = defined &builtin::is_bool ? \&builtin::is_bool : sub { 0 };    # else: the exact path
}

=head1 NAME

CRSBridge::Records - decode and render the binding's input records

=head1 FUNCTIONS

Each takes the caller's value as C<$_[0]>, dies with upstream's decoding error, and returns
the JSON text plus C<$refused>: true when the server will refuse a value (crs-bridge's bounds,
C<out_of_bounds_cores> in L<CRSBridge::Args>): the caller then lets the server say why. An
infinite or NaN number, which JSON cannot carry, dies with the server's wording; for a
mutation (the adds' records, and C<static_stats_param> with C<$mutation>) C<$refused> is that
message instead, to be raised once upstream's own errors of the call are ruled out.

=over

=item static_stats_param($value, $where, $mutation)

C<{maxcpu, maxmem}> (cores, bytes) -> C<($json, $refused)>.

=cut

sub static_stats_param {
    return stats_json(static_stats($_[0]), $_[1], 0, $_[2]);
}

=item dynamic_stats_param($value, $where)

A resource's C<{cpu, maxcpu, mem, maxmem}> -> C<($json, $refused)>.

=cut

sub dynamic_stats_param {
    return stats_json(dynamic_resource_stats($_[0]), $_[1]);
}

=item node_stats_param($value, $where)

A dynamic node's C<{cpu, maxcpu, mem, maxmem}> (C<maxcpu> an integer; capacities must be
positive) -> C<($json, $refused, $mem)>, C<$mem> the decoded memory in use (bytes).

=cut

sub node_stats_param {
    # The common shape, a hash of plain numbers within crs-bridge's bounds (every node of every
    # dynamic HA round), for which the exact decoders would give the same values: decoded and
    # rendered as they would, in a sixth of their time (10 us less per node).
    if (ref $_[0] eq 'HASH') {
        my ($cpu, $maxcpu, $mem, $maxmem) = @{ $_[0] }{qw(cpu maxcpu mem maxmem)};
        # NaN fails the comparisons; usize truncates, as int does for these. Bytes are compared
        # with MAX_BYTES + 1: a double compares with MAX_BYTES as a double, 2**62, and so would
        # pass the double 2**62, which the exact path refuses.
        if (_number($cpu) && _number($maxcpu) && _number($mem) && _number($maxmem)
            && $cpu >= 0 && $cpu <= MAX_CORES && $maxcpu >= 1 && $maxcpu <= MAX_CORES
            && $mem >= 0 && $mem < MAX_BYTES + 1 && $maxmem >= 1 && $maxmem < MAX_BYTES + 1)
        {
            $mem = int($mem);
            # 0 + $cpu: the number as the exact decoder takes it (-0.0 becomes 0, as it writes it).
            return ('{"cpu":' . json_num(0 + $cpu) . ',"maxcpu":' . int($maxcpu) . ',"mem":' . $mem
                . ',"maxmem":' . int($maxmem) . '}', 0, $mem);
        }
    }
    # Anything else: the caller's scalar itself (see CRSBridge::Args).
    my ($json, $refused, $stats) = stats_json(dynamic_node_stats($_[0]), $_[1], 1, 1);
    return ($json, $refused, $stats->{mem});
}

=item plain_resource($mode, $method)

The adder of the common shape of C<add_service> / C<add_resource>'s arguments after the handle
(C<$mode> 'static' or 'dynamic', C<$method> the binding's name of the add), made once per mode:
a function of the caller's C<($sid, $resource)> and a C<$recorder> (L<CRSBridge::Mirror>) that
hands the decoded add to C<< $recorder->add_resource($sid, $current_node,
$target_node_or_undef, $maxmem, $entry) >> (C<$entry> its journal entry, C<[method, sid,
resource]> as JSON) and returns what that returns; undef, without a call, for any other shape
(C<resource_args> then decodes it). The common shape (every guest of every HA round): plain
names (see the top), a plain number or boolean for running, a hash of plain numbers within
crs-bridge's bounds for the stats, for which the exact decoders would give the same values and
accept them: rendered as they would render them (perl-client/t/fast-path.t holds the two
together). The values go to the recorder as arguments, not as a list returned: one add per
guest and round.

=cut

sub plain_resource {
    my ($mode, $method) = @_;
    my $static = $mode eq 'static';
    my $head = '["' . $method . '","';
    return sub {
        my ($sid, $r, $recorder) = @_;
        return undef if ref $r ne 'HASH';
        my ($s, $running, $current, $target) = @$r{ 'stats', 'running', 'current-node', 'target-node' };
        # Plain names (see the top): their characters are judged together, below.
        return undef if ref $s ne 'HASH' || !(_number($running) || _bool($running))
            || !defined $sid || ref $sid || _number($sid) || $sid eq ''
            || !defined $current || ref $current || _number($current) || $current eq ''
            || defined $target && (ref $target || _number($target) || $target eq '');
        # NaN fails the comparisons; bytes: see node_stats_param.
        my ($stats, $maxmem);
        if ($static) {
            my $maxcpu;
            ($maxcpu, $maxmem) = @$s{qw(maxcpu maxmem)};
            return undef if !_number($maxcpu) || !_number($maxmem)
                || !($maxcpu >= 0 && $maxcpu <= MAX_CORES && $maxmem >= 0 && $maxmem < MAX_BYTES + 1);
            $stats = '{"maxcpu":' . ($maxcpu == int($maxcpu) ? int($maxcpu) : sprintf(JSON_NUM, $maxcpu))
                . ',"maxmem":' . int($maxmem) . '}';
        } else {
            my ($cpu, $maxcpu, $mem);
            ($cpu, $maxcpu, $mem, $maxmem) = @$s{qw(cpu maxcpu mem maxmem)};
            return undef if !_number($cpu) || !_number($maxcpu) || !_number($mem) || !_number($maxmem)
                || !($cpu >= 0 && $cpu <= MAX_CORES && $maxcpu >= 0 && $maxcpu <= MAX_CORES)
                || !($mem >= 0 && $mem < MAX_BYTES + 1 && $maxmem >= 0 && $maxmem < MAX_BYTES + 1);
            $stats = '{"cpu":' . ($cpu == int($cpu) ? int($cpu) : sprintf(JSON_NUM, $cpu))
                . ',"maxcpu":' . ($maxcpu == int($maxcpu) ? int($maxcpu) : sprintf(JSON_NUM, $maxcpu))
                . ',"mem":' . int($mem) . ',"maxmem":' . int($maxmem) . '}';
        }
        my $entry = $head . $sid . '",{"stats":' . $stats . ',"running":' . ($running ? 'true' : 'false')
            . ',"current-node":"' . $current . (defined $target ? '","target-node":"' . $target . '"}]' : '"}]');
        # The names' characters, the three at once: none that JSON escapes, none past Latin-1
        # (which Perl's UTF-8 flag on the rendered text shows).
        return undef if utf8::is_utf8($entry) || ($sid . $current . ($target // '')) =~ tr/\x00-\x1f"\\//;
        return $recorder->add_resource($sid, $current, $target, int($maxmem), $entry);
    };
}

=item resource_args($sid, $resource, $mode, $where)

The same arguments of any shape, decoded exactly (see CRSBridge::Args), in their order:
C<($json, $refused, $sid, $current_node, $target_node_or_undef, $maxmem)>, C<$json> the two as
JSON array elements without brackets.

=cut

sub resource_args {
    my ($mode, $where) = @_[2, 3];
    my $sid = arg_string($_[0]);
    my $r = resource($_[1], $mode eq 'static' ? \&static_stats : \&dynamic_resource_stats);
    my ($stats, $refused) = stats_json($r->{stats}, "$where.stats", 0, 1);
    my ($current, $target) = @$r{qw(current target)};
    $refused ||= $sid eq '' || $current eq '' || (defined $target && $target eq '');
    return (json_str($sid) . ',' . _resource_json($stats, $r->{running}, $current, $target), $refused, $sid, $current,
        $target, $r->{stats}{maxmem});
}

sub _resource_json {
    my ($stats, $running, $current, $target) = @_;
    return '{"stats":' . $stats . ',"running":' . ($running ? 'true' : 'false')
        . ',"current-node":' . json_str($current)
        . (defined $target ? ',"target-node":' . json_str($target) : '') . '}';
}

=item candidates_param($value)

An array of compact candidates C<{leader, resources, nodes}> -> C<$json>. Values the server
will refuse (unknown nodes, ...) are left to it.

=item candidates_list($value)

The array of candidates C<$value> refers to (as C<candidates_param> reads it), or undef when it
is no array (C<candidates_param> then dies saying so).

=cut

sub candidates_list {
    my $list = $_[0];
    $list = $$list while _scalar_ref($list);
    return (Scalar::Util::reftype($list) // '') eq 'ARRAY' ? $list : undef;
}

sub candidates_param {
    my $list = $_[0];
    $list = $$list while _scalar_ref($list);
    arg_string_list($_[0]) if (Scalar::Util::reftype($list) // '') ne 'ARRAY';    # dies with serde's message
    my $json = '[';    # then each candidate rendered, and a comma (appended: no list to join)
    # Name lists already rendered by _names_fast (the HA manager's candidates repeat a few
    # target lists), by their count and their join: a name holding NUL must not find the
    # rendering of the names it joins (a count as a key of its own costs a string a candidate).
    my @lists;
    no warnings 'uninitialized';    # an undef name joins as '' (and then takes the exact path)
    # The common shape, written out (every bundle of every HA round: 0.54 us a bundle of 4 x 300,
    # where a rendering in a variable of its own, checked and then appended, took 0.73): a plain leader
    # (see the top; its UTF-8 flag is checked once, below), resources that are the leader alone
    # or plain names, plain target names. A `last FAST` in the middle of the rendering leaves
    # the candidate to the exact decoder before anything of it is appended.
    CANDIDATE: for my $c (@$list) {
        FAST: {
            last FAST if ref $c ne 'HASH';
            my ($leader, $resources, $nodes) = @$c{qw(leader resources nodes)};
            last FAST if ref $leader || ref $resources ne 'ARRAY' || ref $nodes ne 'ARRAY' || _number($leader)
                || $leader eq '' || $leader =~ tr/\x00-\x1f"\\//;
            $json .= '{"leader":"' . $leader . '","resources":'
                . (@$resources == 1 && !ref $resources->[0] && !_number($resources->[0]) && $resources->[0] eq $leader
                    ? qq(["$leader"])
                    : _names_fast($resources) // last FAST)
                . ',"nodes":' . ($lists[@$nodes]{ join("\0", @$nodes) } //= _names_fast($nodes) // last FAST) . '},';
            next CANDIDATE;
        }
        # A candidate the exact decoder may refuse: the names past Latin-1 before it are checked
        # first, as it checks them in order.
        return _candidates_exact($list) if utf8::is_utf8($json);
        $json .= _candidate_exact($c) . ',';
    }
    # Names with characters past Latin-1 (one test for all): the exact decoder checks them all.
    return _candidates_exact($list) if utf8::is_utf8($json);
    chop $json if length $json > 1;    # the last comma
    return $json . ']';
}

sub _candidates_exact {
    return '[' . join(',', map { _candidate_exact($_) } @{ $_[0] }) . ']';
}

sub _scalar_ref { return ref $_[0] eq 'SCALAR' || ref $_[0] eq 'REF' }

# A list of names that are plain strings needing no escapes, rendered by one join; undef when
# an element might be something else. Numbers stringify to something starting with a digit, a
# sign or a dot (the join gives them a string body, which arg_string_list sees through),
# references to "...(0x...)", undef to an empty element, infinities and NaN to "Inf", "-Inf" and
# "NaN"; such lists (and names that merely look like that) take the exact path.
sub _names_fast {
    my ($list) = @_;
    return '[]' if !@$list;
    no warnings 'uninitialized';
    my $joined = join("\0", @$list);
    return undef if ($joined =~ tr/\x00-\x1f"\\//) != $#$list || $joined eq ''
        || $joined =~ /\0[-+.0-9\0]/ || $joined =~ /^[-+.0-9\0]/ || substr($joined, -1) eq "\0"
        || index($joined, '(0x') >= 0 || $joined =~ /(?:^|\0)(?:Inf|NaN)(?:\0|\z)/;
    return '["' . join('","', @$list) . '"]';
}

my @CANDIDATE = (leader => \&arg_string, resources => \&arg_string_list, nodes => \&arg_string_list);

sub _candidate_exact {
    my $c = arg_struct($_[0], 'CompactMigrationCandidate', \@CANDIDATE);
    return '{"leader":' . json_str($c->{leader}) . ',"resources":' . json_str_list($c->{resources})
        . ',"nodes":' . json_str_list($c->{nodes}) . '}';
}

=back

=head2 Exact decoders

Each returns plain Perl data (a hash of the decoded fields), dying with upstream's message.

=over

=item static_stats($value)

C<{maxcpu => number, maxmem => integer}>.

=cut

my @STATIC = (maxcpu => \&arg_f64, maxmem => \&arg_usize);

sub static_stats {
    return arg_struct($_[0], 'StaticResourceStats', \@STATIC);
}

=item dynamic_node_stats($value) / dynamic_resource_stats($value)

C<{cpu, maxcpu, mem, maxmem}>; C<maxcpu> is an integer for a node, a number for a resource.

=cut

my @NODE = (cpu => \&arg_f64, maxcpu => \&arg_usize, mem => \&arg_usize, maxmem => \&arg_usize);
my @DYNAMIC = (cpu => \&arg_f64, maxcpu => \&arg_f64, mem => \&arg_usize, maxmem => \&arg_usize);

sub dynamic_node_stats {
    return arg_struct($_[0], 'DynamicNodeStats', \@NODE);
}

sub dynamic_resource_stats {
    return arg_struct($_[0], 'DynamicResourceStats', \@DYNAMIC);
}

=item resource($value, \&stats_decoder)

C<{stats, running (1/0), current, target (undef when stationary)}>.

=cut

sub resource {
    my $r = arg_struct($_[0], 'PveResource',
        [ stats => $_[1], running => \&arg_bool, 'current-node' => \&arg_string, 'target-node' => \&arg_opt_string ], 3);
    return { stats => $r->{stats}, running => $r->{running}, current => $r->{'current-node'}, target => $r->{'target-node'} };
}

=item stats_json(\%stats, $where, $node, $mutation)

Renders decoded stats of any kind (C<$node> true for node stats, whose capacities must be
positive) as C<($json, $refused)>; core counts become numbers (a node's C<maxcpu> an integer),
byte counts integers. A non-finite core count dies, or with C<$mutation> gives C<('null',
$message)> (see the top).

=cut

sub stats_json {
    my ($s, $where, $node, $mutation) = @_;
    my $problem = (exists $s->{cpu} && finite_problem("$where.cpu", $s->{cpu}))
        || finite_problem("$where.maxcpu", $s->{maxcpu});
    if ($problem) {
        die $problem if !$mutation;
        return ('null', $problem, $s);
    }
    my ($json, $refused) = ('{', 0);
    if (exists $s->{cpu}) {
        $refused ||= out_of_bounds_cores($s->{cpu});
        $json .= '"cpu":' . json_num($s->{cpu}) . ',';
    }
    $refused ||= out_of_bounds_cores($s->{maxcpu}, $node);
    # A node's core count is an integer (usize): as a double, 2**53 + 1 would read as 2**53, which
    # the server accepts, where the client found it out of bounds.
    $json .= '"maxcpu":' . ($node ? json_int($s->{maxcpu}) : json_num($s->{maxcpu}));
    if (exists $s->{mem}) {
        $refused ||= out_of_bounds_bytes($s->{mem});
        $json .= ',"mem":' . json_int($s->{mem});
    }
    $refused ||= out_of_bounds_bytes($s->{maxmem}, $node);
    return ($json . ',"maxmem":' . json_int($s->{maxmem}) . '}', $refused, $s);
}

=back

=cut

1;
