package CRSBridge::Records;

# The binding's input records (binding.md section 2.1): decoded as upstream decodes them,
# checked as crs-bridge checks them (product decision 4), rendered as the JSON the server
# takes. Decoding of a whole argument happens before any value check, as upstream reports
# decoding errors only.

use strict;
use warnings;

use Exporter 'import';
use CRSBridge::Args qw(
    arg_usize arg_f64 arg_string arg_opt_string arg_bool arg_struct arg_string_list missing_field
    out_of_bounds_cores out_of_bounds_bytes check_finite
);
use CRSBridge::Codec qw(json_str json_num json_int json_str_list);

our @EXPORT_OK = qw(
    static_stats dynamic_node_stats dynamic_resource_stats resource candidates
    stats_json resource_json candidates_json
);

=head1 NAME

CRSBridge::Records - decode, check and render the binding's input records

=head1 FUNCTIONS

Each decoder takes the caller's value as C<$_[0]> and a field path for error messages, dies
with upstream's decoding error or crs-bridge's value error, and returns plain Perl data.

=over

=item static_stats($value, $where)

C<{maxcpu, maxmem}> (cores, bytes) -> C<{maxcpu => number, maxmem => integer}>.

=cut

my @STATIC = qw(maxcpu maxmem);

sub static_stats {
    my $where = $_[1];
    my $h = arg_struct($_[0], 'StaticResourceStats', \@STATIC);
    my %s;
    exists $h->{maxcpu} ? ($s{maxcpu} = arg_f64($h->{maxcpu})) : missing_field('maxcpu');
    exists $h->{maxmem} ? ($s{maxmem} = arg_usize($h->{maxmem})) : missing_field('maxmem');
    return \%s;
}

=item dynamic_node_stats($value, $where)

C<{cpu, maxcpu, mem, maxmem}> of a node: cores in use (number), cores (integer), bytes in
use, bytes.

=cut

my @DYNAMIC = qw(cpu maxcpu mem maxmem);

sub dynamic_node_stats {
    return _dynamic($_[0], 'DynamicNodeStats', \&arg_usize);
}

=item dynamic_resource_stats($value, $where)

C<{cpu, maxcpu, mem, maxmem}> of a resource: cores in use, core limit (numbers; 0 = no
limit), bytes in use, memory limit.

=cut

sub dynamic_resource_stats {
    return _dynamic($_[0], 'DynamicResourceStats', \&arg_f64);
}

sub _dynamic {
    my ($struct, $maxcpu) = @_[1, 2];
    my $h = arg_struct($_[0], $struct, \@DYNAMIC);
    my %s;
    exists $h->{cpu} ? ($s{cpu} = arg_f64($h->{cpu})) : missing_field('cpu');
    exists $h->{maxcpu} ? ($s{maxcpu} = $maxcpu->($h->{maxcpu})) : missing_field('maxcpu');
    exists $h->{mem} ? ($s{mem} = arg_usize($h->{mem})) : missing_field('mem');
    exists $h->{maxmem} ? ($s{maxmem} = arg_usize($h->{maxmem})) : missing_field('maxmem');
    return \%s;
}

=item resource($value, \&stats_decoder)

C<{stats, running, 'current-node', 'target-node'}> -> C<{stats, running (1/0), current,
target (undef when stationary)}>.

=cut

my @RESOURCE = ('stats', 'running', 'current-node', 'target-node');

sub resource {
    my $stats_decoder = $_[1];
    my $h = arg_struct($_[0], 'PveResource', \@RESOURCE, 3);
    my %r;
    exists $h->{stats} ? ($r{stats} = $stats_decoder->($h->{stats})) : missing_field('stats');
    exists $h->{running} ? ($r{running} = arg_bool($h->{running})) : missing_field('running');
    exists $h->{'current-node'}
        ? ($r{current} = arg_string($h->{'current-node'}))
        : missing_field('current-node');
    $r{target} = arg_opt_string($h->{'target-node'}) if exists $h->{'target-node'};
    return \%r;
}

=item candidates($value)

An array of compact candidates C<{leader, resources, nodes}> -> array of
C<[leader, \@resources, \@nodes]>.

=cut

my @CANDIDATE = qw(leader resources nodes);

sub candidates {
    my $list = $_[0];
    $list = $$list while ref $list eq 'SCALAR' || ref $list eq 'REF';
    if (ref $list ne 'ARRAY') {
        # Let the sequence decoder produce serde's message for whatever this is.
        arg_string_list($list);
    }
    my @out;
    for my $c (@$list) {
        my $h = arg_struct($c, 'CompactMigrationCandidate', \@CANDIDATE);
        my @cand;
        exists $h->{leader} ? ($cand[0] = arg_string($h->{leader})) : missing_field('leader');
        exists $h->{resources}
            ? ($cand[1] = arg_string_list($h->{resources}))
            : missing_field('resources');
        exists $h->{nodes} ? ($cand[2] = arg_string_list($h->{nodes})) : missing_field('nodes');
        push @out, \@cand;
    }
    return \@out;
}

=back

=head2 Rendering

The renderers return the JSON text and a flag that is true when the server will refuse a
value (crs-bridge's bounds, see L<CRSBridge::Args/out_of_bounds_cores>); infinite and NaN
numbers die here, since JSON cannot carry them.

=over

=item stats_json(\%stats, $where, $node)

Renders decoded stats (any of the three kinds; C<$node> true for node stats, whose
capacities must be positive). Core counts become numbers, byte counts integers.

=cut

sub stats_json {
    my ($s, $where, $node) = @_;
    my ($json, $bad) = ('{', 0);
    if (exists $s->{cpu}) {
        $bad ||= out_of_bounds_cores(check_finite("$where.cpu", $s->{cpu}));
        $json .= '"cpu":' . json_num($s->{cpu}) . ',';
    }
    $bad ||= out_of_bounds_cores(check_finite("$where.maxcpu", $s->{maxcpu}), $node);
    $json .= '"maxcpu":' . json_num($s->{maxcpu});
    if (exists $s->{mem}) {
        $bad ||= out_of_bounds_bytes($s->{mem});
        $json .= ',"mem":' . json_int($s->{mem});
    }
    $bad ||= out_of_bounds_bytes($s->{maxmem}, $node);
    return ($json . ',"maxmem":' . json_int($s->{maxmem}) . '}', $bad);
}

=item resource_json(\%resource, $where)

Renders a decoded resource; also flags an empty node name.

=cut

sub resource_json {
    my ($r, $where) = @_;
    my ($stats, $bad) = stats_json($r->{stats}, "$where.stats");
    my $target = $r->{target};
    $bad ||= $r->{current} eq '' || (defined $target && $target eq '');
    return ('{"stats":' . $stats
        . ',"running":' . ($r->{running} ? 'true' : 'false')
        . ',"current-node":' . json_str($r->{current})
        . ',"target-node":' . (defined $target ? json_str($target) : 'null') . '}', $bad);
}

=item candidates_json(\@candidates)

Renders decoded candidates as a JSON array of compact candidates.

=cut

sub candidates_json {
    my ($list) = @_;
    return '[' . join(',', map {
        '{"leader":' . json_str($_->[0]) . ',"resources":' . json_str_list($_->[1])
            . ',"nodes":' . json_str_list($_->[2]) . '}'
    } @$list) . ']';
}

=back

=cut

1;
