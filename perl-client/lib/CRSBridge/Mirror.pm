package CRSBridge::Mirror;

use strict;
use warnings;

=head1 NAME

CRSBridge::Mirror - what the client must know of a scheduler object before the server is asked

=head1 DESCRIPTION

Mutations (C<add_node>, C<add_service>, ...) are buffered: the server applies them later
(L<CRSBridge::Batching>), but the call that causes an upstream error must die with it, in
upstream's order. A mirror holds what those errors, C<list_nodes> and C<contains_node> need,
and the object's journal; nothing of the usage arithmetic, which the server alone owns:

=over

=item * the node names, in insertion order;

=item * where each resource is placed: its node, or its current and target node while it moves;

=item * a bound on memory (see C<add_resource>): one number, never a node's usage;

=item * the journal: every mutation accepted, in order, each the JSON text C<[method, args...]>
of one C<scheduler.apply> entry. It is the object's whole state: a new server gets it replayed,
the flight recorder writes it, and two objects with equal journals are in the same state.

=back

The rules below exist on both sides because the client must answer before the server is
asked; the server's copy, which decides, is C<core/usage.py> (class C<Usage>, following
upstream's crate), and perl-client/t/mirror.t and static.t hold the two together:

=over

=item * C<add_node>: a duplicate name (C<Usage.add_node>).

=item * C<add_resource>: a duplicate sid, then the placement: unknown current node
(stationary), same current and target node, unknown nodes (moving)
(C<Usage.check_resource>, C<_check_placement>; here C<add_resource>).

=item * C<legacy_add> (Static's C<add_service_usage_to_node>): an unknown sid is added
stationary, a stationary one starts moving, a moving one dies
(C<Usage.add_resource_usage_to_node>).

=item * C<remove_node>: its stationary resources go, a moving resource stays on its other
node (C<Usage.remove_node>); the placements must follow for later errors to be upstream's.

=back

A failed operation changes nothing, as on the server. A successful one records its change and
its journal entry in one statement, which calls nothing: a signal handler that dies (an alarm)
finds both made or neither, so the journal and the checks never disagree. The mirror's state
is its own: other modules change it through the methods below only.

=head1 METHODS

Methods named C<add_*>/C<legacy_add> check first and die with upstream's message (ending in
a newline) without changing anything, and return true once recorded; C<remove_*> return
whether something was removed (removing an unknown name is a no-op, as upstream, and journals
nothing). Each mutation takes
its journal entry as its last argument (undef: none, for tests of the rules alone).

=over

=item new()

An empty mirror.

=cut

sub new {
    my ($class) = @_;
    # order: node names in insertion order; nodes: name -> 1; res: sid -> its node (a stationary
    # resource: a string, no array per guest) or [current, target] (a moving one). No index of
    # each node's resources: only remove_node needs one, and it is rare, while adds are many.
    # bound: see MEMORY_RISK; journal: see the top.
    return bless { order => [], nodes => {}, res => {}, bound => 0, journal => [] }, $class;
}

=item journal()

The journal (an array reference, to read, never to change): every mutation accepted, in order.

=cut

sub journal { return $_[0]{journal} }

# A memory risk: an add of a resource whose maxmem might take a node past the server's limit on
# a node's memory (2**62 - 1 bytes), which the caller then sends as a single call, so that the
# server decides and its refusal reaches the caller, not a later call. The mirror does not
# count a node's memory (the server does, Usage._check_memory); it keeps one loose bound,
# bound: the memory in use of every node added plus the maxmem of every resource added, each
# once (also where it counts on two nodes), never decreased. No node's memory, as the server
# counts it, can exceed it; the risk starts where bound and the add's maxmem reach half the
# limit, which an HA round's cluster stays far below (add_resource judges it).
use constant MEMORY_RISK => 2**61;

=item node_names() / has_node($name)

Node names in insertion order (a new array reference); whether a node exists.

=cut

sub node_names { return [ @{ $_[0]{order} } ] }

sub has_node { return exists $_[0]{nodes}{ $_[1] } }

=item has_resource($sid)

Whether a resource exists.

=cut

sub has_resource { return exists $_[0]{res}{ $_[1] } }

=item add_node($name, $mem, $entry)

Dies with C<node '<name>' already exists>. C<$mem>: the node's memory in use (bytes; undef
for a static node), counted in the bound.

=cut

sub add_node {
    my ($self, $name, $mem, $entry) = @_;
    $self->check_node($name);
    my ($bytes, @entry) = ($mem // 0, grep defined, $entry);
    $self->{nodes}{$name} = 1, $self->{bound} += $bytes, push(@{ $self->{order} }, $name),
        push @{ $self->{journal} }, @entry;
    return 1;
}

=item check($op, @args)

Dies as the method C<$op> (C<add_node>, C<add_resource>, C<legacy_add>) would with C<@args>,
and changes nothing: upstream's semantic errors, for a caller that must know them before it
sends a value the server may refuse for its own reasons (upstream's error wins where upstream
fails anyway).

=cut

my %CHECK = (add_node => \&check_node, add_resource => \&check_resource, legacy_add => \&check_legacy_add);

sub check {
    my ($self, $op, @args) = @_;
    my $check = $CHECK{$op} or return;
    $self->$check(@args);
    return;
}

sub check_node {
    my ($self, $name) = @_;
    die "node '$name' already exists\n" if exists $self->{nodes}{$name};
    return;
}

=item remove_node($name, $entry)

Removes the node; its stationary resources go, a moving resource stays on its other node.

=cut

sub remove_node {
    my ($self, $name, $entry) = @_;
    return 0 if !exists $self->{nodes}{$name};
    my %res = %{ $self->{res} };
    for my $sid (keys %res) {
        my $placement = $res{$sid};
        if (!ref $placement) {
            delete $res{$sid} if $placement eq $name;
        } elsif ($placement->[0] eq $name || $placement->[1] eq $name) {
            my ($current, $target) = @$placement;
            $res{$sid} = $current eq $name ? $target : $current;
        }
    }
    my ($order, @entry) = ([ grep { $_ ne $name } @{ $self->{order} } ], grep defined, $entry);
    delete $self->{nodes}{$name}, @$self{qw(order res)} = ($order, \%res), push @{ $self->{journal} }, @entry;
    return 1;
}

=item check_resource($sid, $current, $target)

Upstream's checks for adding a resource, in upstream's order: duplicate sid, unknown
current node (stationary), same current and target node, unknown nodes (moving)
(C<add_resource>'s, without the add).

=cut

sub check_resource {
    my ($self, $sid, $current, $target) = @_;
    $self->add_resource($sid, $current, $target, 0, undef, 'check');
    return;
}

=item add_resource($sid, $current, $target, $maxmem, $entry, $how)

Checks (C<check_resource>) and records the placement (C<$target> undef: stationary) and the
resource's C<$maxmem> bytes; returns true. An add that might take a node's memory near the
server's limit (a memory risk: the memory in use of every node and the maxmem of every
resource added so far, never decreased, and C<$maxmem> reach 2**61 bytes) records nothing and
returns false: the caller sends it as a single call, for the server to decide, and records it
with C<$how> 1 (risky) once the server has accepted it. C<$how> 'check': the checks alone
(C<check_resource>); 'move': the placement's checks alone (a known stationary resource that
starts moving, C<legacy_add>).

=cut

sub add_resource {
    my ($self, $sid, $current, $target, $maxmem) = @_;    # then $entry, read in @_ (one add per guest)
    my ($how, $nodes) = ($_[6], $self->{nodes});    # $how: undef, 1 (risky), 'check' or 'move'
    # Upstream's checks, in its order: written here alone, the add's own (one per guest) costing
    # no call.
    die "resource '$sid' already exists\n" if exists $self->{res}{$sid} && !($how && $how eq 'move');
    if (!defined $target) {
        die "current node for resource '$sid' does not exist\n" if !exists $nodes->{$current};
    } elsif ($current eq $target) {
        die "resource '$sid' has the same current and target node\n";
    } elsif (!exists $nodes->{$current} || !exists $nodes->{$target}) {
        die "nodes for resource '$sid' do not exist\n";
    }
    return 1 if $how && $how ne '1';    # 'check', 'move': the checks alone
    return 0 if !$how && $self->{bound} + $maxmem >= MEMORY_RISK;
    my $placement = defined $target ? [ $current, $target ] : $current;
    # One statement: a signal handler that dies (an alarm) finds the add made or not at all.
    $self->{res}{$sid} = $placement, $self->{bound} += $maxmem, push @{ $self->{journal} }, grep defined, $_[5];
    return 1;
}

=item remove_resource($sid, $entry)

=cut

sub remove_resource {
    my ($self, $sid, $entry) = @_;
    return 0 if !exists $self->{res}{$sid};
    my @entry = grep defined, $entry;
    delete $self->{res}{$sid}, push @{ $self->{journal} }, @entry;
    return 1;
}

=item legacy_add($node, $sid, $maxmem, $entry, $risky)

Static's C<add_service_usage_to_node>: an unknown sid is added stationary on C<$node> with
C<$maxmem> bytes (as C<add_resource>: false at a memory risk unless C<$risky>); a stationary
one starts moving to C<$node> (with its own maxmem, counted in the bound already); a moving one
dies with C<resource '<sid>' is already moving to target node
'<target>'>.

=cut

sub legacy_add {
    my ($self, $node, $sid, $maxmem, $entry, $risky) = @_;
    return $self->add_resource($sid, $node, undef, $maxmem, $entry, $risky) if !exists $self->{res}{$sid};
    $self->check_legacy_add($node, $sid);
    my ($placement, @entry) = ([ $self->{res}{$sid}, $node ], grep defined, $entry);
    $self->{res}{$sid} = $placement, push @{ $self->{journal} }, @entry;
    return 1;
}

sub check_legacy_add {
    my ($self, $node, $sid) = @_;
    my $placement = $self->{res}{$sid};
    return $self->check_resource($sid, $node) if !defined $placement;
    die "resource '$sid' is already moving to target node '$placement->[1]'\n" if ref $placement;
    $self->add_resource($sid, $placement, $node, 0, undef, 'move');
    return;
}

=back

=cut

1;
