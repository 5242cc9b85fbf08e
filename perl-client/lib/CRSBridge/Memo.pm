package CRSBridge::Memo;

use strict;
use warnings;

=head1 NAME

CRSBridge::Memo - the answers of a repeated round

=head1 DESCRIPTION

The HA manager rebuilds its usage every round, and in static mode the rebuilt usage and the
candidates are mostly the same as the last round's. The server's answer to a query is a pure
function of the server, the object's mode and imbalance formula, its journal (every mutation,
in order: its whole state, see L<CRSBridge::Mirror>) and the query's method and params text.
So the connection remembers here the answers of the most recent journal queried: the server,
the kind (mode and formula), that journal and its length then, and the answer lines by method
and params, the first C<ANSWERS>. Another object whose journal has that length and the same
entries is in the same state: the journals are compared entry by entry up to the first
difference (a dynamic round's measured usage differs in its first node, so a miss costs next
to nothing), and the memo then follows the newer object, whose journal the next round is
compared with. A query in another state replaces the memo: one journal and a few answers are
kept, whatever the process does.

This holds only for a journal the server has accepted entry by entry: the connection answers
from memory only once every mutation of the object has been answered (see
L<CRSBridge::Connection/query>).

=head1 METHODS

=over

=item new()

An empty memo.

=cut

# Most answers remembered for one journal: a round asks a few.
use constant ANSWERS => 16;

sub new {
    my ($class) = @_;
    return bless { srv => '', kind => '', journal => undef, at => -1, answers => [] }, $class;
}

=item holds($remote, $srv)

Whether the memo holds the state of C<$remote> (L<CRSBridge::Remote>) on server C<$srv>; it
then follows C<$remote>'s journal.

=cut

sub holds {
    my ($self, $remote, $srv) = @_;
    my $journal = $remote->entries;
    return 0 if $self->{srv} ne $srv || @$journal != $self->{at} || $self->{kind} ne $remote->kind;
    return 1 if $self->{journal} == $journal;
    my $old = $self->{journal};
    for my $i (0 .. $#$journal) {
        return 0 if $journal->[$i] ne $old->[$i];    # a dynamic round: at its first node
    }
    $self->{journal} = $journal;    # the older journal may go with its object
    return 1;
}

=item answer($method, $params)

The remembered answer line to C<$method> with C<$params>, or undef. (The answers are a list
compared with C<eq>: a round asks a few, and a hash keyed by the params would copy and hash a
long candidate list at every query.)

=cut

sub answer {
    my ($self, $method, $params) = @_;
    for my $answer (@{ $self->{answers} }) {
        return $answer->[2] if $answer->[0] eq $method && $answer->[1] eq $params;
    }
    return undef;
}

=item remember($held, $remote, $srv, $at, $method, $params, $line)

Remembers the answer C<$line> the server C<$srv> gave to C<$method> with C<$params> for
C<$remote>, whose journal had C<$at> entries; C<$held>: C<holds> said so before the query.
One statement each: a signal handler that dies (an alarm) leaves the old memo or the new. A
full memo keeps the answers it has: a round's first queries, which the next round repeats.

=cut

sub remember {
    my ($self, $held, $remote, $srv, $at, $method, $params, $line) = @_;
    if ($held && $self->{srv} eq $srv) {
        push @{ $self->{answers} }, [ $method, $params, $line ] if @{ $self->{answers} } < ANSWERS;
        return;
    }
    my $journal = $remote->entries;
    @$self{qw(srv kind journal at answers)} = ($srv, $remote->kind, $journal, $at, [ [ $method, $params, $line ] ]);
    return;
}

=back

=cut

1;
