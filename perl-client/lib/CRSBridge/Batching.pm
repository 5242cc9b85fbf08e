package CRSBridge::Batching;

use strict;
use warnings;

use POSIX ();

use CRSBridge::Codec qw(decode_json_text json_str);

=head1 NAME

CRSBridge::Batching - when the journals' new entries go to the server, and what came of them

=head1 DESCRIPTION

Mutations are journaled (L<CRSBridge::Mirror>) and reach the server later, as one
C<scheduler.apply> request per object with all its new entries (after its C<scheduler.new>
if it has not been sent, see L<CRSBridge::Connection/create>), in one batch message that also
frees the handles of dropped objects. A batch goes with the next call's request, in one write,
or on its own once enough entries have piled up, without waiting for its answer: the server
applies it while Perl builds the rest. Its answer is checked when it arrives: an object whose
mutation (or creation) the server refused is poisoned (L<CRSBridge::Remote>), as is every
object of a batch refused whole (over the server's size limit).

One of these belongs to a connection; it owns the flush policy's counters, the handles to free
and the batches awaiting an answer.

=head1 FLUSH POLICY

Buffered mutations are sent once FIRST_CHUNK have piled up (over all objects) after a call,
then each time twice as many as the last time, up to CHUNK: the server applies them while Perl
builds the next ones, and a query waits for at most CHUNK of them. A round of fewer than
FIRST_CHUNK mutations goes in one write with its first query (a batch of its own costs a write,
a request and a wake-up on each side, which a few dozen entries of overlap do not pay for).

When the last run (the entries journaled between two calls) had at least FIRST_CHUNK, as an HA
round's adds have, the same count round after round, the next run goes in chunks of TAIL_SHARE
of the entries that run says are still to come (up to CHUNK): the server applies one while
Perl builds the next. Once a chunk would be fewer than TAIL_CHUNK, the rest goes with the
query; a run longer than the last grows its chunks as above. The figures behind the constants
are in docs/.

=cut

use constant { FIRST_CHUNK => 64, CHUNK => 250, TAIL_CHUNK => 32, TAIL_SHARE => 0.6 };
# Most journal entries in one scheduler.apply (a replay of a longer journal takes several).
use constant APPLY_MAX => 10000;

=head1 METHODS

=over

=item new()

=cut

sub new {
    my ($class) = @_;
    # due: how many entries journaled after the last batch make the next one due; run: entries
    # sent since the last call's flush; expected: the last run's count if it had at least
    # FIRST_CHUNK, else 0; frees: handles to free; batches: sent, not yet answered.
    return bless { due => FIRST_CHUNK, run => 0, expected => 0, frees => [], batches => [] }, $class;
}

=item new_server()

A new server: nothing is awaited from it, nothing is to be freed on it.

=cut

sub new_server {
    my ($self) = @_;
    @$self{qw(frees batches)} = ([], []);
    return;
}

=item due()

How many entries journaled (over all objects) after the last batch make the next one due: the
connection counts them (L<CRSBridge::Connection/journaled>) and asks for a batch then.

=cut

sub due { return $_[0]{due} }

=item free($handle)

Frees the handle with the next batch.

=cut

sub free {
    my ($self, $handle) = @_;
    push @{ $self->{frees} }, $handle;
    return;
}

=item batch(\@remotes, $srv, $first_id, $ends_run)

The batch of everything unsent of C<@remotes> (in that order; those on another server or
unusable are skipped) and the frees, as one line with request ids from C<$first_id> on, or
undef when there is nothing to send. The remotes' entries count as sent; the caller queues the
line. C<$ends_run>: the flush of a call, which ends a run (see FLUSH POLICY). Returns
C<($line, $next_id)>.

=cut

sub batch {
    my ($self, $remotes, $srv, $id, $ends_run) = @_;
    my $first = $id;
    my (@parts, @ranges, %news);    # ranges: [first id, remote (undef: frees), first journal index]
    for my $remote (@$remotes) {
        next if !$remote->usable || !$remote->on_server($srv) || !$remote->unsent;
        if ($remote->unborn) {
            $remote->born;
            $news{$id} = $remote;
            push @parts, '{"jsonrpc":"2.0","method":"scheduler.new","id":' . $id++
                . ',"params":' . $remote->new_params(1) . '}';
        }
        my ($from, $journal) = $remote->take_unsent;
        $self->{run} += @$journal - $from;
        my $head = ',"params":{"scheduler":' . json_str($remote->handle) . ',"mutations":[';
        for (my $at = $from; $at < @$journal; $at += APPLY_MAX) {
            my $last = $at + APPLY_MAX - 1 < $#$journal ? $at + APPLY_MAX - 1 : $#$journal;
            push @ranges, [ $id, $remote, $at ];
            push @parts, '{"jsonrpc":"2.0","method":"scheduler.apply","id":' . $id++ . $head
                . join(',', @$journal[ $at .. $last ]) . ']}}';
        }
    }
    push @ranges, [ $id, undef, 0 ];
    $self->{due} = $self->_next_due($ends_run);
    for my $handle (@{ $self->{frees} }) {
        push @parts, '{"jsonrpc":"2.0","method":"scheduler.free","id":' . $id++
            . ',"params":{"scheduler":' . json_str($handle) . '}}';
    }
    $self->{frees} = [];
    return (undef, $id) if !@parts;
    push @{ $self->{batches} }, { first => $first, last => $id - 1, ranges => \@ranges, news => \%news };
    return ('[' . join(',', @parts) . "]\n", $id);
}

# How many entries make the flush after this one due (see FLUSH POLICY): at a call's flush
# ($ends_run), which ends a run (unless it was empty), FIRST_CHUNK; else twice as many as this
# one's, up to CHUNK; but TAIL_SHARE of what the last run says is still to come, up to CHUNK,
# unless that is fewer than TAIL_CHUNK.
sub _next_due {
    my ($self, $ends_run) = @_;
    my $due = $self->{due} * 2 < CHUNK ? $self->{due} * 2 : CHUNK;
    if ($ends_run) {
        $self->{expected} = $self->{run} >= FIRST_CHUNK ? $self->{run} : 0 if $self->{run};
        ($self->{run}, $due) = (0, FIRST_CHUNK);
    }
    my $share = POSIX::ceil(TAIL_SHARE * ($self->{expected} - $self->{run}));
    return $share < TAIL_CHUNK ? $due : $share < CHUNK ? $share : CHUNK;
}

=item awaited()

How many batches sent await their answer.

=cut

sub awaited { return scalar @{ $_[0]{batches} } }

=item answered($line)

The answer line of the oldest batch awaited (a JSON array): the objects whose requests it
refused are poisoned.

=cut

sub answered {
    my ($self, $line) = @_;
    my $batch = shift @{ $self->{batches} };
    return if index($line, '"error"') < 0;    # all mutations succeeded (their results are null)
    my $answers = decode_json_text($line);
    for my $answer (@$answers) {
        next if !$answer->{error} || !$batch;
        if (my $remote = $batch->{news}{ $answer->{id} // '' }) {
            $remote->poison($answer->{error}{message} // 'no message', 'scheduler.new');
            next;
        }
        my ($remote, $first) = _owner($batch, $answer->{id} // -1) or next;
        _refused($remote, $first, $answer->{error});
    }
    return;
}

=item refused_whole($message)

An error answer without an id, the refusal of a batch as a whole: if a batch is awaited, the
oldest is taken as refused (its objects are poisoned) and the result is true.

=cut

sub refused_whole {
    my ($self, $message) = @_;
    my $batch = shift @{ $self->{batches} } or return 0;
    $_->poison($message, 'batch') for _owners($batch);
    return 1;
}

# A scheduler.apply of $remote's journal from entry $first on was refused: poison $remote,
# naming the failing entry's method, with the server's message as the single call would have
# worded it.
sub _refused {
    my ($remote, $first, $error) = @_;
    my $message = $error->{message} // 'no message';
    my $data = ref $error->{data} eq 'HASH' ? $error->{data} : {};
    my $index = $data->{index} // ($message =~ /\bmutations\[(\d+)\]/ ? $1 : 0);
    my ($method) = ($remote->entries->[ $first + $index ] // '') =~ /^\["([^"]+)"/;
    $message =~ s/\bmutations\[$index\]\.//g;
    $remote->poison($message, $method // 'mutation');
    return;
}

# The remote and first journal index request $id of a batch was sent for (empty for a free).
sub _owner {
    my ($batch, $id) = @_;
    return if $id < $batch->{first} || $id > $batch->{last};
    my ($range) = grep { $_->[0] <= $id } reverse @{ $batch->{ranges} };    # (a new's id is in none)
    return if !$range || !$range->[1];
    return ($range->[1], $range->[2] + $id - $range->[0]);
}

# The remotes with requests in a batch: their creations and their journals.
sub _owners {
    my ($batch) = @_;
    my @ranges = @{ $batch->{ranges} };
    my @remotes = values %{ $batch->{news} };
    for my $i (0 .. $#ranges) {
        my ($start, $remote) = @{ $ranges[$i] };
        my $end = $i < $#ranges ? $ranges[ $i + 1 ][0] - 1 : $batch->{last};
        push @remotes, $remote if $remote && $start <= $batch->{last} && $end >= $batch->{first};
    }
    return @remotes;
}

=back

=cut

1;
