package CRSBridge::Restore;

use strict;
use warnings;

use CRSBridge::Codec qw(decode_json_text);

=head1 NAME

CRSBridge::Restore - re-create the live scheduler objects on a new server

=head1 DESCRIPTION

A server is disposable: after a crash, a timeout, a fork or an interrupted call, the
connection starts a new one, and every live object (L<CRSBridge::Remote>) is created there
again, as one batch of C<scheduler.new> requests, before anything else is sent. Each object's
whole journal then counts as unsent: the next batch (L<CRSBridge::Batching>) replays it. An
object the new server does not create is unusable, saying why.

=head1 FUNCTIONS

=over

=item restore($proc, \@remotes, $srv, $first_id, $deadline)

Creates C<@remotes> (in order; the unusable ones are left out) on the new server C<$proc>,
named C<$srv>, with request ids from C<$first_id> on, waiting until C<$deadline> (epoch
seconds) for the answer. Returns the next free request id. Dies as C<$proc> does when the
server fails.

=cut

sub restore {
    my ($proc, $remotes, $srv, $first, $deadline) = @_;
    my @remotes = grep { $_->usable } @$remotes;
    return $first if !@remotes;
    my $id = $first;
    my @requests = map {
        qq({"jsonrpc":"2.0","id":) . $id++ . qq(,"method":"scheduler.new","params":) . $_->new_params . '}'
    } @remotes;
    my $line = '[' . join(',', @requests) . "]\n";
    utf8::encode($line);
    $proc->queue($line);
    my $answers;
    while (!$answers) {
        my $got = $proc->read_line($deadline);
        $answers = decode_json_text($got) if substr($got, 0, 1) eq '[';
    }
    my %by_id = map { ($_->{id} // '') => $_ } @$answers;
    for my $i (0 .. $#remotes) {
        my ($remote, $answer) = ($remotes[$i], $by_id{ $first + $i });
        if (!$answer || $answer->{error}) {
            $remote->poison_restore($answer ? $answer->{error}{message} : 'no answer');
            next;
        }
        $remote->bind($answer->{result}{scheduler}, $srv);
    }
    return $id;
}

=back

=cut

1;
