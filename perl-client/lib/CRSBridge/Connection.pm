package CRSBridge::Connection;

# The one crs-bridge server of this Perl process, shared by all scheduler objects: its life
# (started on first use, replaced after a failure, a fork or an interrupted call, its objects
# restored there) and the exchange of JSON-RPC messages with it. What goes in a batch and when
# is CRSBridge::Batching's, an object's server-side state CRSBridge::Remote's, its journal
# CRSBridge::Mirror's, the restore CRSBridge::Restore's, the repeated answers CRSBridge::Memo's.

use strict;
use warnings;

use CRSBridge::Batching;
use CRSBridge::Codec qw(backend decode_answer json_str);
use CRSBridge::Failure;
use CRSBridge::Memo;
use CRSBridge::Process;
use CRSBridge::Remote;
use CRSBridge::Restore;

# The connection of this process ({pid} == $$), or one inherited across fork.
my $CURRENT;

=head1 NAME

CRSBridge::Connection - the shared crs-bridge server of a Perl process

=head1 SETTINGS

C<timeout> and C<start-timeout> (L<CRSBridge::Config>): a call that gets no answer in time
kills the server and dies saying so; the next call starts a new server and restores every
object.

=head1 INTERRUPTED CALLS

A call cut short by a signal whose handler dies (C<alarm> under
C<PVE::Tools::run_with_timeout>, or pve-cluster's C<cfs_lock>) dies with the handler's message,
and the connection stays usable: the next call, on any object, finds the exchange unfinished,
kills that server and starts a new one, where every live object is restored from its journal.
Reading past the stale answers instead would keep a server that is still computing the
abandoned request (often the slow one the alarm was for: the next call would wait for it too),
and a signal can cut the client between two steps of its bookkeeping (bytes written but not
yet dropped from the buffer, journal entries marked sent but not yet queued), after which the
server's state would no longer be the journal's. A new server has exactly the journal's state;
the cost is one server start after an interruption. A mutation whose call was interrupted is
not in the journal: as for any call that dies, it did not happen.

=head1 ANSWERS OF A REPEATED ROUND

A query whose object is in the state of one answered before, asking the same, gets the
remembered answer (L<CRSBridge::Memo>), the same line as the server wrote, without the query
being sent, but only once the server has accepted every mutation of the object: its unsent
ones are sent and every batch's answer is awaited first. An object whose mutations the server
refused (a creation or a batch over a limit per message, which another object's identical
journal may have passed) so dies as when asked.

A new server (after a restart or a fork) is another server: nothing it did not answer is
remembered. Nor is anything answered from memory while an exchange is unfinished (see
INTERRUPTED CALLS: the next query replaces the server).

=head1 METHODS

=over

=item instance()

The connection of the calling process; after a fork the child gets a new one (its server is
started on first use, and every live object is restored there), and leaves the parent's
server alone.

=cut

sub instance {
    return $CURRENT if $CURRENT && $CURRENT->{pid} == $$;
    my $inherited = $CURRENT;
    $inherited->_abandon if $inherited;
    # live: id -> CRSBridge::Remote of every live object of this process; servers: servers
    # started so far, to tell a handle's server apart from the current one; objects: objects
    # created so far (their ids); busy: an exchange is unfinished (see INTERRUPTED CALLS);
    # created: kinds (Remote::kind) created on this server; answer: the last answer line;
    # journaled: entries journaled since the last batch, due: as many as make the next one due.
    return $CURRENT = bless {
        pid => $$, proc => undef, srv => '', number => 0, next_id => 1, busy => 0, created => {},
        live => $inherited ? $inherited->{live} : {},
        servers => $inherited ? $inherited->{servers} : 0,
        objects => $inherited ? $inherited->{objects} : 0,
        batching => CRSBridge::Batching->new, memo => CRSBridge::Memo->new, answer => undef,
        journaled => 0, due => CRSBridge::Batching::FIRST_CHUNK,
    }, __PACKAGE__;
}

=item server_pid()

Process id of the current server (undef when none runs); for tests and diagnostics.

=cut

sub server_pid { return $_[0]{proc} ? $_[0]{proc}->pid : undef }

=item last_answer() / forget_answer()

A reference to the last answer line read for a call or given from memory, as the server wrote
it (for L<CRSBridge::Recorder>, which records answers bit for bit); undef after
C<forget_answer>.

=cut

sub last_answer { return $_[0]{answer} }
sub forget_answer { $_[0]{answer} = undef; return }

=item create($mode, $imbalance, $mirror)

Creates a scheduler object of C<$mode> with the imbalance formula C<$imbalance>, whose journal
C<$mirror> keeps (L<CRSBridge::Mirror>), on the server (C<scheduler.new>), starting the server
if needed, and returns its L<CRSBridge::Remote>.

The first object of a mode and formula on a server waits for the server's answer, so that a
refusal (an unknown formula) dies here with the server's message. Later ones need no answer:
the object gets a handle of the client's choosing (C<c> and its id, unique in this process,
which has a server of its own), and its C<scheduler.new> travels with the next batch, ahead of
its journal (the server runs a batch in order); should the server refuse it after all, the
object is poisoned as for a refused buffered mutation. A round's C<new>, journal and first
query so reach the server in one write, and the round waits for two answers, not three.

=cut

sub create {
    my ($self, $mode, $imbalance, $mirror) = @_;
    my $remote = CRSBridge::Remote->new(++$self->{objects}, $mode, $imbalance, $mirror);
    if ($self->{proc} && !$self->{busy} && $self->{created}{ $remote->kind }) {
        $remote->bind('c' . $remote->id, $self->{srv}, 1);
    } else {
        my $result = $self->call(undef, 'scheduler.new', $remote->new_params);
        $remote->bind($result->{scheduler}, $self->{srv});
        $self->{created}{ $remote->kind } = 1;
    }
    $self->{live}{ $remote->id } = $remote;
    return $remote;
}

=item journaled()

A function: an entry was journaled by a mirror; once as many as L<CRSBridge::Batching/due>,
the unsent entries are sent (L<CRSBridge::Batching/FLUSH POLICY>). A dead server does not fail
the mutation (the next call notices it, starts a new server and restores everything); after an
interrupted exchange nothing is sent: the next call replaces the server and replays every journal anyway.

=cut

sub journaled {
    # (A forked child counts in the connection it inherited; its own sends.)
    my $self = $CURRENT // instance();
    return if ++$self->{journaled} < $self->{due};
    instance()->_flush_quietly;
    return;
}

sub _flush_quietly {
    my ($self) = @_;
    return if $self->{busy};
    $self->{busy} = 1;
    if (eval { $self->_flush(0); 1 }) {
        $self->{busy} = 0;
        return;
    }
    my $error = $@;
    die $error if !(ref $error && $error->isa('CRSBridge::Process::Error'));
    return;
}

# Queues the batch of everything unsent (CRSBridge::Batching::batch). With $ends_run (a call's
# flush), the batch waits in the buffer for the request queued next: one write.
sub _flush {
    my ($self, $ends_run) = @_;
    return if !$self->{proc};
    my $live = $self->{live};
    my @remotes = map { $live->{$_} } sort { $a <=> $b } keys %$live;
    my ($line, $next_id) = $self->{batching}->batch(\@remotes, $self->{srv}, $self->{next_id}, $ends_run);
    @$self{qw(journaled due)} = (0, $self->{batching}->due);
    return if !defined $line;
    utf8::encode($line);
    $self->{next_id} = $next_id;
    $self->{proc}->queue($line, $ends_run);
    return;
}

=item call_mutation($remote, $method, $args_json, \&record)

Sends a mutation at once (after the buffered ones) as the single call C<scheduler.$method>
(C<$args_json>: its arguments after the handle, as JSON array elements without brackets), so
that a refusal is worded as for that call, and calls C<record> (the mirror's record of it,
journal entry included) when the server accepts it; dies with the server's message otherwise.
The record is made before the exchange ends: a signal handler that dies once the server has
accepted leaves the exchange unfinished (see INTERRUPTED CALLS), and the next call's new server
has the journal's state, with the mutation or without it.

=cut

sub call_mutation {
    my ($self, $remote, $method, $args, $record) = @_;
    # The call flushed everything before it, and carries the new entry itself.
    $self->call($remote, "scheduler.$method", $args, 1, sub { $record->(); $remote->all_sent });
    return;
}

=item call($remote, $method, $params_json, $positional, $accepted)

Sends the buffered mutations, then C<$method> (full name) with the handle of C<$remote> and
C<$params_json> (members without braces, or with C<$positional> array elements without
brackets; for a remote of undef, a whole JSON object), and returns the decoded result. Dies
with the server's message plus a newline on an error answer, and as C<check_usable> for an
unusable object. A server that dies during the call is replaced, the objects restored and the
call retried (a new server that dies is started once more: see CRSBridge::Failure's
C<gives_up> for the bound); a hung server is killed and the call dies. C<$accepted> (optional
code reference) is called once the answer is a result, before the exchange counts as finished.

=cut

sub call {
    my ($self, $remote, $method, $params, $positional, $accepted) = @_;
    return _result($self->_retrying($method, sub { $self->_call_once($remote, $method, $params, $positional, $accepted) }));
}

# Runs $attempt (an exchange, true on success) until it succeeds. A server that dies is
# replaced, the objects restored and $attempt run again, as often as CRSBridge::Failure allows
# for the servers this call started (_server_failed, which also dies for a hung server).
sub _retrying {
    my ($self, $method, $attempt) = @_;
    CRSBridge::Failure::limits();    # a bad setting dies before anything is sent
    my $first_new = $self->{servers} + 1;    # servers from this number on were started by this call
    my %deaths;    # of the servers this call started (see CRSBridge::Failure::gives_up)
    while (1) {
        my $done = eval { $attempt->() };
        return $done if $done;
        my $error = $@;
        die $error if !(ref $error && $error->isa('CRSBridge::Process::Error'));
        # A server that was already running may have died any time before: it is replaced.
        $self->_server_failed($error, $method, $self->{number} >= $first_new && \%deaths);
    }
}

=item query($remote, $method, $params_json)

A read-only query (params as for C<call>, named): C<call>, unless the object's state and the
query are those of a query already answered (see ANSWERS OF A REPEATED ROUND); then the
remembered answer, decoded afresh (the caller may change what it gets). C<last_answer> is the
answer line either way.

=cut

sub query {
    my ($self, $remote, $method, $params) = @_;
    my $memo = $self->{memo};
    my $held = $self->{proc} && !$self->{busy} && $memo->holds($remote, $self->{srv});
    my $line = $held ? $memo->answer($method, $params) : undef;
    if (defined $line && $self->_accepted_all($remote)) {
        $remote->check_usable;
        $self->{answer} = \$line;
        return _result(_decoded($line));
    }
    my $at = @{ $remote->entries };
    my $result = $self->call($remote, $method, $params);
    $memo->remember($held, $remote, $self->{srv}, $at, $method, $params, ${ $self->{answer} });
    return $result;
}

# Whether the server has answered every mutation sent to it, $remote's unsent ones sent first
# (the answers read are checked: a refusal poisons its object). False when the server failed
# meanwhile: the exchange stays unfinished, and the caller's call replaces the server.
sub _accepted_all {
    my ($self, $remote) = @_;
    my $batching = $self->{batching};
    return 1 if !$remote->unsent && !$batching->awaited;
    $self->{busy} = 1;
    my $done = eval {
        $self->_flush(1);    # written by the reads below
        my $deadline = $self->_deadline;
        $self->_take_line($self->{proc}->read_line($deadline), undef) while $batching->awaited;
        1;
    };
    my $error = $@;
    die $error if !$done && !(ref $error && $error->isa('CRSBridge::Process::Error'));
    $self->{busy} = 0 if $done;
    return $done;
}

sub _call_once {
    my ($self, $remote, $method, $params, $positional, $accepted) = @_;
    $self->_ensure_server;
    $remote->check_usable if $remote;
    $self->{busy} = 1;
    $self->_flush(1);    # sent with the request, in one write
    my $id = $self->_send($remote, $method, $params, $positional);
    my $answer = $self->_await($id, $self->_deadline);
    $accepted->() if $accepted && !$answer->{error};
    $self->{busy} = 0;
    $remote->check_usable if $remote;
    return $answer;
}

# Queue the request (params as for call) and return its id.
sub _send {
    my ($self, $remote, $method, $params, $positional) = @_;
    my $id = $self->{next_id}++;
    # The params are copied once, into the line: a part of a long candidate list is 100 KB.
    my ($open, $handle, $close) = !$remote ? ('', '', '')
        : $positional ? ('[', json_str($remote->handle), ']')
        : ('{"scheduler":', json_str($remote->handle), '}');
    my $comma = $remote && $params ne '' ? ',' : '';
    my $line = qq({"jsonrpc":"2.0","id":$id,"method":"$method","params":$open$handle$comma$params$close}\n);
    utf8::encode($line);
    $self->{proc}->queue($line);
    return $id;
}

=item call_series($remote, \@calls)

Sends the calls C<@calls> (C<[$method, $params_json]> pairs, as for C<call>) one after another
without waiting, and returns their answers in order, each the whole decoded response (with its
C<result> or its C<error>). C<$params_json> may be a code reference that returns it, called when
the call is sent: Perl builds the next part while the server works on the last. A server that
dies is replaced and the series sent again, as C<call> does (code references are not called
twice); an exception of a code reference is rethrown once the calls already sent are answered.

=cut

sub call_series {
    my ($self, $remote, $calls) = @_;
    my @params;    # as sent, for another attempt
    return $self->_retrying($calls->[-1][0], sub { $self->_call_series_once($remote, $calls, \@params) });
}

sub _call_series_once {
    my ($self, $remote, $calls, $params) = @_;
    $self->_ensure_server;
    $remote->check_usable;
    $self->{busy} = 1;
    $self->_flush(1);    # sent with the first call, in one write
    my @ids;
    for my $i (0 .. $#$calls) {
        my ($method, $p) = @{ $calls->[$i] };
        if (!defined $params->[$i]) {
            $params->[$i] = ref $p eq 'CODE' ? eval { $p->() } : $p;
            if (!defined $params->[$i]) {
                my $error = $@;
                $self->_await($_, $self->_deadline) for @ids;    # keep requests and answers in step
                $self->{busy} = 0;
                die $error;
            }
        }
        push @ids, $self->_send($remote, $method, $params->[$i]);
    }
    my @answers = map { $self->_await($_, $self->_deadline) } @ids;
    $self->{busy} = 0;
    $remote->check_usable;
    return \@answers;
}

sub _result {
    my ($answer) = @_;
    my $error = $answer->{error};
    if (!$error) {
        return $answer->{result} if exists $answer->{result};
        die "crs-bridge: the server answered with neither a result nor an error:"
            . " is the configured command 'crs-bridge serve'?\n";
    }
    my ($code, $message) = ($error->{code} // 0, $error->{message} // 'no message');
    die "$message\n" if $code == -32000 || $code == -32602;
    die "crs-bridge: the server lost this scheduler object ($message)\n" if $code == -32001;
    die "crs-bridge: server error $code: $message\n";
}

# A died or timed-out server: drop it, and either let the caller retry or die saying why.
# $deaths (a hash of the call's, undef for a server the call did not start) counts the deaths
# of servers the call started, see _gives_up.
sub _server_failed {
    my ($self, $error, $method, $deaths) = @_;
    my $proc = delete $self->{proc};
    $proc->kill;
    CRSBridge::Failure::judge($proc, $error, $method, $deaths);
    return;    # retry: the next attempt starts a new server and restores the objects
}

sub _deadline { return CRSBridge::Failure::deadline($_[0]{proc}) }

# Starts a server if none runs, and restores every live object there. One whose last exchange
# was cut short (busy: a signal handler died in it; see INTERRUPTED CALLS) is killed and
# replaced first.
sub _ensure_server {
    my ($self) = @_;
    if ($self->{busy}) {
        my $proc = delete $self->{proc};
        $proc->kill if $proc;
        $self->{busy} = 0;
    }
    return if $self->{proc};
    backend();    # a missing JSON module says so here, not as an answer that "is not JSON"
    $self->{proc} = CRSBridge::Process->spawn;
    $self->{number} = ++$self->{servers};
    $self->{srv} = "$self->{servers}/$$";
    @$self{qw(created journaled)} = ({}, 0);
    $self->{batching}->new_server;
    $self->{busy} = 1;
    my $live = $self->{live};
    $self->{next_id} = CRSBridge::Restore::restore($self->{proc}, [ map { $live->{$_} } sort { $a <=> $b } keys %$live ],
        $self->{srv}, $self->{next_id}, $self->_deadline);
    $self->{busy} = 0;
    return;
}

# Read answers until the one for request $id; batch answers on the way are checked.
sub _await {
    my ($self, $id, $deadline) = @_;
    while (1) {
        my $line = $self->{proc}->read_line($deadline);
        my $answer = $self->_take_line($line, $id) or next;
        $self->{answer} = \$line;
        return $answer;
    }
}

# An answer line of the server: a batch's or a refused batch's is checked (false), the one for
# request $id is returned decoded; anything else dies.
sub _take_line {
    my ($self, $line, $id) = @_;
    if (substr($line, 0, 1) eq '[') {
        $self->{batching}->answered($line);
        return;
    }
    my $answer = _decoded($line);
    return $answer if defined $id && defined $answer->{id} && $answer->{id} eq $id;
    # A batch refused as a whole (e.g. over the server's size limit).
    return if !defined $answer->{id} && $answer->{error}
        && $self->{batching}->refused_whole($answer->{error}{message});
    die "crs-bridge: unexpected answer from the server: " . substr($line, 0, 200) . "\n";
}

sub _decoded {
    my ($line) = @_;
    my $answer = eval { decode_answer($line) };
    # A die that is not the decoder's (a signal handler's: an alarm) goes on as it is.
    die $@ if $@ ne '' && $@ !~ /, at character offset \d+/;
    die "crs-bridge: the server sent something that is not JSON: " . substr($line, 0, 200) . "\n"
        if ref $answer ne 'HASH';
    return $answer;
}

=item release($remote)

Called when an object is destroyed: forgets it and frees its server-side state with the next
batch, unless its handle belongs to another server (a forked parent's, or a dead one).

=cut

sub release {
    my ($class, $remote) = @_;
    my $self = $CURRENT or return;
    delete $self->{live}{ $remote->id };
    return if $self->{pid} != $$ || !$self->{proc} || !$remote->on_server($self->{srv});
    return if $remote->unborn;    # never sent: nothing to free
    $self->{batching}->free($remote->handle);
    return;
}

sub _abandon {
    my ($self) = @_;
    $self->{proc}->abandon if $self->{proc} && $self->{proc}->owner != $$;
    $self->{proc} = undef;
    return;
}

=item shutdown()

Stops this process's server (at program end): asks it to exit (C<shutdown>), then closes its
input. The request matters when a forked child still holds the server's input open, so that
closing it is no end of input for the server.

=cut

sub shutdown {
    my ($self) = @_;
    my $proc = delete $self->{proc} or return;
    return $proc->kill if $self->{busy};    # cut short mid-exchange: it may be computing for nobody
    # The answer is never read; a server that is already gone makes queue throw, which is fine.
    eval { $proc->queue(qq({"jsonrpc":"2.0","id":0,"method":"shutdown"}\n)); 1 };
    $proc->stop;
    return;
}

END {
    $CURRENT->shutdown if $CURRENT && $CURRENT->{pid} == $$;
}

=back

=cut

1;
