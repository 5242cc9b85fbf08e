package PVE::RS::ResourceScheduling::Static;

use strict;
use warnings;

use parent 'CRSBridge::Scheduler';

use CRSBridge::Args qw(check_arity arg_string arg_str arg_usize out_of_bounds_cores out_of_bounds_bytes);
use CRSBridge::Codec qw(json_str json_int);
use CRSBridge::Records qw(static_stats_param);

use constant BINDING => __PACKAGE__;
use constant MODE => 'static';

=head1 NAME

PVE::RS::ResourceScheduling::Static - crs-bridge drop-in for libpve-rs-perl's static scheduler

=head1 SYNOPSIS

    use PVE::RS::ResourceScheduling::Static;

    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node('node1', 16, 64 * 2**30);                # cores, bytes
    $usage->add_service('vm:100', {
        stats => { maxcpu => 4.0, maxmem => 8 * 2**30 },
        running => 1, 'current-node' => 'node1',
    });
    my $scores = $usage->score_nodes_to_start_service({ maxcpu => 2.0, maxmem => 2**30 });
    # [ [ 'node1', 0 ] ]

=head1 DESCRIPTION

Same package name, methods, arguments, return shapes and error messages as
C<PVE::RS::ResourceScheduling::Static> of libpve-rs-perl 0.13.0, computed by a crs-bridge
server (a Python process started on first use and shared by all objects of this Perl
process; see L<CRSBridge::Connection>). Put this library first in C<@INC>
(C<PERL5LIB=perl-client/lib>) and PVE::HA::Usage::Static works unchanged.

Static mode knows node capacities only; every service counts at its configured limits
(C<maxcpu> cores, 0 = all cores of the node; C<maxmem> bytes) on its current node, and on its
target node too while it moves. Errors are thrown as strings ending in a newline.

Arguments are decoded as upstream's perlmod decodes them, by the scalar's body type, with its
error texts and in its order (a record's hash in the hash's own order, so an invalid field beats
a missing one). Where upstream fails anyway, its error is the one raised, also where crs-bridge
would refuse a value of the same call for its own reasons.

=head2 Differences from upstream, on purpose

=over

=item * Order: C<list_nodes> and the start scores come in insertion order (upstream: random),
and every number is the one upstream's crate computes for the nodes in that order, to the last
bit. Upstream's hash maps sum in a random order, so on identical or mirrored nodes its last bits,
and the ties they decide, vary from run to run; here they are the crate's for insertion order,
every run.

=item * Values upstream computes NaN or nonsense from are refused, with a message naming the
field (C<Invalid params: service.stats.maxcpu: ...>): node capacities of 0; negative, infinite
or NaN numbers; empty node names and sids (adds only; removes and lookups take any string);
unknown target nodes and targets equal to their source in candidates.

=item * Bounds: core counts above 2**53 and byte counts above 2**62 - 1 (upstream accepts up to
2**64 - 1 bytes, so values in [2**62, 2**63) are refused here and taken there), also a node's
aggregated memory past 2**62 - 1 (refused by the add that would take it there) and a bundle's
summed memory.

=item * Names: a string holding a character UTF-8 cannot carry (a surrogate, past U+10FFFF) is
refused at its call. In a candidate's C<nodes> and C<resources>, a number is refused even after
the caller stringified it (upstream takes such a scalar as a string; perl 5.36 and later).

=item * A failing C<add_service_usage_to_node> changes nothing (upstream loses a moving
resource on C<is already moving>).

=back

=head1 METHODS

=over

=item new()

A new, empty usage. Dies when the server cannot be started, saying why.

=cut

sub new {
    check_arity('new', \@_, 'class');
    my $class = shift;
    return $class->_new(@_);
}

=item add_node($nodename, $maxcpu, $maxmem)

Adds a node with C<$maxcpu> cores and C<$maxmem> bytes (integers, both > 0). Dies with
C<node '<name>' already exists>. Returns nothing.

=cut

sub add_node {
    check_arity('add_node', \@_, qw(this nodename maxcpu maxmem)) if @_ != 4;
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my $name = arg_string($_[1]);
    my ($maxcpu, $maxmem) = (arg_usize($_[2]), arg_usize($_[3]));
    my $refused = out_of_bounds_cores($maxcpu, 1) || out_of_bounds_bytes($maxmem, 1);
    CRSBridge::Scheduler::_add_node($st, $name, json_int($maxcpu) . ',' . json_int($maxmem), $refused);
    return;
}

=item add_service($sid, \%service)

C<\%service> = C<{ stats => { maxcpu, maxmem }, running => $bool, 'current-node' => $node,
'target-node' => $node_or_undef }>. With a target node the service is moving and counts on
both nodes. Dies with upstream's messages: C<resource '<sid>' already exists>, C<current node
for resource '<sid>' does not exist>, C<resource '<sid>' has the same current and target
node>, C<nodes for resource '<sid>' do not exist>. Returns nothing.

=cut

# Shared with the dynamic scheduler (CRSBridge::Scheduler).
*add_service = CRSBridge::Scheduler::_resource_adder(MODE, 'add_service', 'service');

=item add_service_usage_to_node($nodename, $sid, \%service_stats)

Legacy (HA 5.2 no longer calls it): an unknown C<$sid> is added as running on C<$nodename>
with C<{ maxcpu, maxmem }>; a known stationary one starts moving to C<$nodename> (keeping its
stats); a moving one dies with C<resource '<sid>' is already moving to target node '<t>'>.
Returns nothing.

=cut

sub add_service_usage_to_node {
    check_arity('add_service_usage_to_node', \@_, qw(this nodename sid service_stats)) if @_ != 4;
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my $name = arg_str($_[1]);
    my $sid = arg_str($_[2]);
    my ($json, $refused, $stats) = static_stats_param($_[3], 'service_stats', 1);
    $refused ||= $sid eq '' || $name eq '';
    CRSBridge::Scheduler::_mutate($st, 'add_service_usage_to_node', json_str($name) . ',' . json_str($sid) . ',' . $json,
        $refused, legacy_add => $name, $sid, $stats->{maxmem});
    return;
}

=item remove_service_usage($sid)

Removes a service from its node(s); an unknown sid is a no-op. Returns nothing.

=cut

sub remove_service_usage {
    check_arity('remove_service_usage', \@_, qw(this sid)) if @_ != 2;
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my $sid = arg_str($_[1]);
    CRSBridge::Scheduler::_remove_resource($st, 'remove_service_usage', $sid);
    return;
}

=item score_nodes_to_start_service(\%service_stats)

Array reference of C<[ $nodename, $score ]> for every node (in node order), score in [0, 1],
higher is better, for starting a service with C<{ maxcpu, maxmem }> there.

=cut

sub score_nodes_to_start_service {
    check_arity('score_nodes_to_start_service', \@_, qw(this service_stats));
    my $st = CRSBridge::Scheduler::_state($_[0]);
    my ($json) = static_stats_param($_[1], 'service_stats');
    return CRSBridge::Scheduler::_query($st, 'score_nodes_to_start_service', '"service_stats":' . $json);
}

=back

Also: C<remove_node>, C<list_nodes>, C<contains_node>, C<calculate_node_imbalance>,
C<score_best_balancing_migration_candidates>,
C<score_best_balancing_migration_candidates_topsis>, and the crs-bridge extras
C<select_best_balancing_migration> and C<select_best_balancing_migration_topsis>: see
L<CRSBridge::Scheduler>; and the crs-bridge planning extras C<plan_rebalance> and
C<explain_migrations>: see L<CRSBridge::Planning>.

=head1 CONFIGURATION

F</etc/crs-bridge/crs-bridge.conf> (or the file named by C<CRS_BRIDGE_CONFIG>) and
C<CRS_BRIDGE_*> environment variables, which win: the server command, the imbalance formula,
timeouts, the log target, the JSON module, the flight recorder (L<CRSBridge::Recorder>). See
L<CRSBridge::Config>.

=cut

1;
