package CRSBridge::Connection;

# The one crs-bridge server of this Perl process, shared by all scheduler objects.
#
# Mutations (add_node, add_service, ...) are only appended to their object's journal; they
# reach the server as one scheduler.apply request per object (all its new journal entries),
# sent ahead of the next query or whenever enough have piled up (without waiting for the
# answer, so the server works while Perl builds the rest).
# The journals also make the server disposable: a new server (after a crash, a timeout, a fork
# or an interrupted call) gets every live object re-created and its journal replayed before the
# next call. And they tell when a query repeats one in the same state: its answer is remembered.

use strict;
use warnings;

use POSIX ();
use Time::HiRes qw(time);

use CRSBridge::Codec qw(backend decode_answer decode_json_text json_str);
use CRSBridge::Config;
use CRSBridge::Process;

# Buffered mutations are sent once FIRST_CHUNK have piled up (over all objects) after a call,
# then each time twice as many as the last time, up to CHUNK: the server applies them while
# Perl builds the next ones, starting early in a round (its new object and nodes, the first
# guests) and keeping pace with it, and a query waits for at most CHUNK of them. A batch of its
# own costs a write, a request and a wake-up on each side, which a few dozen adds of overlap do
# not pay for: a round of fewer than FIRST_CHUNK mutations goes in one write with its first query
# (3 x 30: p50 5 % lower on average over four runs with 64 than with 16; 4 x 300, 8 x 500 alike).
# The last chunk, though, goes with the query, which waits while the server applies it: up to
# CHUNK. So when the last run (the entries journaled between two calls, if any) had at least
# FIRST_CHUNK, as an HA round's adds have, the same count round after round, the next run goes
# in chunks of TAIL_SHARE of the entries that run says are still to come (up to CHUNK), each 0.4
# times the last: the server applies one (1 us an add) while Perl builds the next (2.5 us an
# add). Once a chunk would be fewer than TAIL_CHUNK, the rest goes with the query (4 x 300: 181,
# 72, and 48 with the query; before, 64, 128 and 112), and a run longer than the last grows its
# chunks as above. Few chunks: each write cost a round's adds 10 to 40 us here (more on a busy
# machine), and halving the rest instead (64, 119, 59, 32, and 27 with the query) gained less,
# and lost on a busy machine.
use constant { FIRST_CHUNK => 64, CHUNK => 250, TAIL_CHUNK => 32, TAIL_SHARE => 0.6 };
# Most journal entries in one scheduler.apply (a replay of a longer journal takes several).
use constant APPLY_MAX => 10000;
# Most answers remembered for one journal (see query): a round asks a few.
use constant MEMO_ANSWERS => 16;

my $CURRENT;       # the connection of this process ($CURRENT->{pid} == $$), or one inherited across fork
my %LIVE;          # object id -> state of every live scheduler object of this process
my $SERVERS = 0;   # servers started so far, to tell a handle's server apart from the current one
my $PENDING = 0;    # journal entries not yet queued to the server, over all objects
my $DUE = FIRST_CHUNK;    # ... and how many make a flush due (see journal_room)
my $RUN = 0;         # entries journaled since the last call's flush: the current run's so far
my $EXPECTED = 0;    # entries of the last run if it had at least FIRST_CHUNK, else 0
# The last answer read for a call or given from memory (a reference to the line as the server
# wrote it), for CRSBridge::Recorder, which records answers bit for bit.
our $ANSWER;

=head1 NAME

CRSBridge::Connection - the shared crs-bridge server of a Perl process, with journals and restore

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

The HA manager rebuilds its usage every round, and in static mode the rebuilt usage and the
candidates are mostly the same as the last round's. The server's answer to a query is a pure
function of the server, the object's mode and imbalance formula, its journal (every mutation,
in order: its whole state) and the query's method and params text. So C<query> remembers the
successful answers of the most recent journal queried (a memo: the server, the mode and
formula, a reference to that journal and its length then, and the answer lines by method and
params, the first C<MEMO_ANSWERS>), and answers a query with the same five from memory, the
same line as the server wrote, without a round trip. Another object whose journal has that
length and the same entries is in the same state: the journals are compared entry by entry up
to the first difference (a dynamic round's measured usage differs in its first node: a miss
costs next to nothing; an identical round costs one string comparison per entry), and the memo
then follows the newer object, whose journal the next round is compared with. A query in
another state replaces the memo: one journal and a few answers are kept, whatever the process
does.

A new server (after a restart or a fork) is another server: nothing it did not answer is
remembered. Nor is anything answered from memory while an exchange is unfinished (see
INTERRUPTED CALLS: the next query replaces the server) or for an object known to be unusable
(the answers that have arrived are taken in first), which dies as before. The batches of
mutations still go to the server, and nobody waits for their answers when every query is
answered from memory: each answer from memory first takes in those that have arrived
(checking them as a call would), so that they do not pile up.

The object's mutations not yet answered are taken as accepted, as the remembered object's
were. The server could refuse them only by a limit per message (C<max_message_bytes>), which
another batch may exceed (a new object's also carries its C<scheduler.new>): then the query is
answered from memory where the server's refusal would have made it die, and the object's next
call dies instead (t/memo.t has it as a TODO).

=head1 OBJECT STATE

A scheduler object's state is a hash. Its creator gives C<mode> and C<imbalance> (read here
to create the object on each new server) and may keep keys of its own (L<CRSBridge::Scheduler>:
C<mirror>); this module owns, and alone reads and writes, the rest: C<id>, C<handle> and C<srv>
(its server-side handle and the server it is valid on), C<jf> (journal: one
C<scheduler.apply> entry per mutation, the JSON text C<[method, args...]>; read it with
C<journal_entries>), C<sent> (journal entries already queued to the current server), C<unborn>
(its C<scheduler.new> not yet sent, see C<create>), C<poison> (set when the server refused a
buffered mutation or its creation: see C<usable>), C<dead>. The journal's flush policy
(C<FIRST_CHUNK>, C<CHUNK>, C<TAIL_CHUNK>, C<TAIL_SHARE>) is this module's too: a caller that
collects entries asks C<journal_room> how many it may hold.

=head1 METHODS

=over

=item instance()

The connection of the calling process; after a fork the child gets a new one (its server is
started on first use, and every live object is restored there), and leaves the parent's
server alone.

=cut

sub instance {
    return $CURRENT if $CURRENT && $CURRENT->{pid} == $$;
    $CURRENT->_abandon if $CURRENT;
    $PENDING = 0;
    return $CURRENT = bless {
        pid => $$, proc => undef, srv => '', number => 0, next_id => 1,
        dirty => [], frees => [], batches => [],
    }, __PACKAGE__;
}

=item server_pid()

Process id of the current server (undef when none runs); for tests and diagnostics.

=cut

sub server_pid {
    my ($self) = @_;
    return $self->{proc} ? $self->{proc}->pid : undef;
}

=item create(\%state)

Creates the object on the server (C<scheduler.new> with the state's C<mode> and
C<imbalance>), starting the server if needed, and registers the state as live.

The first object of a mode and formula on a server waits for the server's answer, so that a
refusal (an unknown formula) dies here with the server's message. Later ones need no answer:
the object gets a handle of the client's choosing (C<c> and its id, unique in this process,
which has a server of its own), and its C<scheduler.new> travels with the next batch, ahead of
its journal (the server runs a batch in order); should the server refuse it after all, the
object is poisoned as for a refused buffered mutation. A round's C<new>, journal and first
query so reach the server in one write, and the round waits for two answers, not three.

=cut

my $NEXT_OBJECT = 0;

sub create {
    my ($self, $st) = @_;
    $st->{id} = ++$NEXT_OBJECT;
    @$st{qw(jf sent)} = ([], 0);
    my $kind = _kind($st);
    if ($self->{proc} && !$self->{busy} && $self->{created}{$kind}) {
        @$st{qw(handle srv unborn)} = ("c$st->{id}", $self->{srv}, 1);
        push @{ $self->{dirty} }, $st;
    } else {
        my $result = $self->call(undef, 'scheduler.new', _new_params($st));
        @$st{qw(handle srv)} = ($result->{scheduler}, $self->{srv});
        $self->{created}{$kind} = 1;
    }
    $LIVE{ $st->{id} } = $st;
    # Creations wait for a batch, which a process answered from memory and making no mutations
    # never sends: they would pile up.
    $self->_flush_quietly if @{ $self->{dirty} } >= CHUNK;
    return;
}

# The params of the state's scheduler.new, with its handle if the client chooses it.
sub _new_params {
    my ($st, $handle) = @_;
    return '{"mode":' . json_str($st->{mode}) . ',"imbalance":' . json_str($st->{imbalance})
        . (defined $handle ? ',"scheduler":' . json_str($handle) : '') . '}';
}

=item mutate(\%state, $method, $args_json, $change)

Journals the mutation C<$method> (C<add_node>, ...) with C<$args_json>, its arguments after
the handle in the binding's order as JSON array elements without brackets
(C<"n1",16,68719476736>), together with the caller's own record of it (C<$change>, an optional
code reference, e.g. the mirror's): both are made, or neither, whatever signal handler dies
meanwhile (an alarm: signals wait while the two are made). It is sent later; the caller has
already checked that it succeeds. Dies as C<check_usable> for an unusable object.

=cut

# Every signal: blocked while a mutation is journaled with the caller's record of it.
my $ALL_SIGNALS = POSIX::SigSet->new;
$ALL_SIGNALS->fillset;

sub mutate {
    my ($self, $st, $method, $args, $change) = @_;
    check_usable($st);
    # The flush, which may wait for the server, comes after the mask (an alarm must be able to
    # end that wait).
    _all_or_none($change, sub { journal_many($st, [qq(["$method",$args])], 'hold') });
    $self->_flush_quietly if $PENDING >= $DUE;
    return;
}

# Runs the code references (undef: none) in order with every signal blocked: a signal handler
# that dies (an alarm) finds all of them made or none. A signal that came before the mask is
# handled at the first statement after it, before anything is made.
sub _all_or_none {
    my @steps = grep {defined} @_;
    my ($old, $blocked) = (POSIX::SigSet->new);
    my $made = eval {
        $blocked = POSIX::sigprocmask(POSIX::SIG_BLOCK, $ALL_SIGNALS, $old);
        $_->() for @steps;
        1;
    };
    my $error = $@;
    POSIX::sigprocmask(POSIX::SIG_SETMASK, $old) if $blocked;
    die $error if !$made;
    return;
}

=item journal_many(\%state, \@entries, $hold)

Journals the entries (JSON texts C<[method, args...]>, in order), taking them out of
C<@entries>, which is left empty; a flush follows when one is due (unless C<$hold>: the
caller's next step then sees to it). For a caller that collects
entries (L<CRSBridge::Scheduler>'s adds, a round's thousands) and has checked the object's
C<usable> when it began. The entries are taken in one statement: a signal handler that dies
meanwhile (an alarm) finds each of them either still in C<@entries> or journaled.

=cut

sub journal_many {
    my ($st, $entries, $hold) = @_;
    my $count = @$entries or return;
    # Reading $$ is a system call, too dear for every batch: the process is checked when the
    # entries are sent. A forked child that journals into the connection it inherited changes
    # nothing that matters: its own connection (instance) starts a new server and restores
    # every object, whole journals included.
    my $self = $CURRENT // instance();
    my $jf = $st->{jf};
    push @{ $self->{dirty} }, $st if $st->{sent} == @$jf;
    push @$jf, splice @$entries;
    ($PENDING, $RUN) = ($PENDING + $count, $RUN + $count);
    instance()->_flush_quietly if $PENDING >= $DUE && !$hold;
    return;
}

=item journal_room()

How many more entries may be journaled, over all objects, before a flush is due (at least 1).
A caller that collects entries hands them to C<journal_many> once it holds that many, and
before anything else is journaled: the flushes then fall where they would entry by entry.

=cut

sub journal_room { return $DUE - $PENDING > 1 ? $DUE - $PENDING : 1 }

=item journal_entries(\%state)

The object's journal (an array reference, to read, not to change): every mutation it has
accepted, in order, each the JSON text C<[method, args...]>.

=cut

sub journal_entries { return $_[0]{jf} }

=item usable(\%state)

False when the object is unusable (see C<check_usable>).

=cut

sub usable { return !$_[0]{poison} }

=item check_usable(\%state)

Dies saying why when the object is unusable: the server refused one of its buffered mutations,
or it could not be restored on a new server.

=cut

sub check_usable {
    die $_[0]{poison} if $_[0]{poison};
    return;
}

=item call_mutation(\%state, $method, $args_json, $change)

Sends a mutation at once (after the buffered ones) as the single call C<scheduler.$method>
(positional params), so that a refusal is worded as for that call, and journals it, together
with the caller's own record of it (C<$change>, as for C<mutate>), when the server accepts it;
dies with the server's message otherwise. Journal and record are made before the exchange
ends: a signal handler that dies once the server has accepted leaves the exchange unfinished
(see INTERRUPTED CALLS), and the next call's new server has the journal's state, with the
mutation or without it.

=cut

sub call_mutation {
    my ($self, $st, $method, $args, $change) = @_;
    my $entry = qq(["$method",$args]);
    my $journal = sub {
        push @{ $st->{jf} }, $entry;
        $st->{sent} = @{ $st->{jf} };    # the call flushed everything before it
    };
    $self->call($st, "scheduler.$method", $args, 1, sub { _all_or_none($change, $journal) });
    return;
}

=item call(\%state, $method, $params_json, $positional, $accepted)

Sends the buffered mutations, then C<$method> (full name) with the state's handle and
C<$params_json> (members without braces, or with C<$positional> array elements without
brackets; for a state of undef, a whole JSON object), and returns the decoded result. Dies
with the server's message plus a newline on an error answer. A server that dies during the
call is replaced, the objects restored and the call retried (a new server that dies is
started once more: see _gives_up for the bound); a hung server is killed and the call dies.
C<$accepted> (optional code reference) is called once the answer is a result, before the
exchange counts as finished.

=cut

sub call {
    my ($self, $st, $method, $params, $positional, $accepted) = @_;
    _limits();    # a bad setting dies before anything is sent
    my $first_new = $SERVERS + 1;    # servers from this number on were started by this call
    my %deaths;    # of the servers this call started (see _server_failed)
    while (1) {
        my $answer = eval { $self->_call_once($st, $method, $params, $positional, $accepted) };
        return _result($answer, $st) if $answer;
        my $error = $@;
        die $error if !(ref $error && $error->isa('CRSBridge::Process::Error'));
        my $new = $self->{number} >= $first_new;
        # A server that was already running may have died any time before: it is replaced.
        $self->_server_failed($error, $method, $new && \%deaths);
    }
}

=item query(\%state, $method, $params_json)

A read-only query (params as for C<call>, named): C<call>, unless the object's state and the
query are those of a query already answered (see ANSWERS OF A REPEATED ROUND); then the
remembered answer, decoded afresh (the caller may change what it gets), without asking the
server. C<$ANSWER> is the answer line either way. Dies as C<call> does, and as
C<check_usable> for an unusable object.

=cut

sub query {
    my ($self, $st, $method, $params) = @_;
    my $memo = $self->_memo_for($st);
    my $line = $memo && _remembered($memo, $method, $params);
    if (defined $line) {
        $self->_take_arrived;    # first: a refusal that has arrived poisons the object
        check_usable($st);
        $ANSWER = \$line;
        return _result(_decoded($line), $st);
    }
    my $at = @{ $st->{jf} };
    my $result = $self->call($st, $method, $params);
    # One statement each: a signal handler that dies (an alarm) leaves the old memo or the new.
    # A full memo keeps the answers it has: a round's first queries, which the next round repeats.
    if ($memo && $memo->{srv} eq $self->{srv}) {
        push @{ $memo->{answers} }, [ $method, $params, ${$ANSWER} ] if @{ $memo->{answers} } < MEMO_ANSWERS;
    } else {
        $self->{memo} = { srv => $self->{srv}, kind => _kind($st), jf => $st->{jf}, at => $at,
            answers => [ [ $method, $params, ${$ANSWER} ] ] };
    }
    return $result;
}

# The memo's answer line to $method with $params, or undef. The answers are a list compared
# with eq (a round has a few): a hash keyed by the params would copy and hash the params text
# at every query, 7 us for a candidate list of 4 x 300.
sub _remembered {
    my ($memo, $method, $params) = @_;
    for my $answer (@{ $memo->{answers} }) {
        return $answer->[2] if $answer->[0] eq $method && $answer->[1] eq $params;
    }
    return undef;
}

# The memo if it holds $st's state (the memo then follows $st), else undef.
sub _memo_for {
    my ($self, $st) = @_;
    my ($memo, $jf) = ($self->{memo}, $st->{jf});
    return undef if !$memo || $memo->{srv} ne $self->{srv} || $self->{busy} || !$self->{proc}
        || @$jf != $memo->{at} || $memo->{kind} ne _kind($st);
    return $memo if $memo->{jf} == $jf;
    my $old = $memo->{jf};
    for my $i (0 .. $#$jf) {
        return undef if $jf->[$i] ne $old->[$i];    # a dynamic round: at its first node
    }
    $memo->{jf} = $jf;    # the older journal may go with its object
    return $memo;
}

sub _kind { return "$_[0]{mode} $_[0]{imbalance}" }

sub _call_once {
    my ($self, $st, $method, $params, $positional, $accepted) = @_;
    $self->_ensure_server;
    die $st->{poison} if $st && $st->{poison};
    $self->{busy} = 1;
    $self->_flush(1);    # sent with the request, in one write
    my $id = $self->_send($st, $method, $params, $positional);
    my $answer = $self->_await($id, $self->_deadline);
    $accepted->() if $accepted && !$answer->{error};
    $self->{busy} = 0;
    die $st->{poison} if $st && $st->{poison};
    return $answer;
}

# Queue the request (params as for call) and return its id.
sub _send {
    my ($self, $st, $method, $params, $positional) = @_;
    my $id = $self->{next_id}++;
    # The params are copied once, into the line: a part of a long candidate list is 100 KB.
    my ($open, $handle, $close) = !$st ? ('', '', '')
        : $positional ? ('[', json_str($st->{handle}), ']')
        : ('{"scheduler":', json_str($st->{handle}), '}');
    my $comma = $st && $params ne '' ? ',' : '';
    my $line = qq({"jsonrpc":"2.0","id":$id,"method":"$method","params":$open$handle$comma$params$close}\n);
    utf8::encode($line);
    $self->{proc}->queue($line);
    return $id;
}

=item call_series(\%state, \@calls)

Sends the calls C<@calls> (C<[$method, $params_json]> pairs, as for C<call>) one after another
without waiting, and returns their answers in order, each the whole decoded response (with its
C<result> or its C<error>). C<$params_json> may be a code reference that returns it, called when
the call is sent: Perl builds the next part while the server works on the last. A server that
dies is replaced and the series sent again, as C<call> does (code references are not called
twice); an exception of a code reference is rethrown once the calls already sent are answered.

=cut

sub call_series {
    my ($self, $st, $calls) = @_;
    _limits();
    my $first_new = $SERVERS + 1;
    my %deaths;    # of the servers this call started (see _server_failed)
    my @params;    # as sent, for another attempt
    while (1) {
        my $answers = eval { $self->_call_series_once($st, $calls, \@params) };
        return $answers if $answers;
        my $error = $@;
        die $error if !(ref $error && $error->isa('CRSBridge::Process::Error'));
        my $new = $self->{number} >= $first_new;
        $self->_server_failed($error, $calls->[-1][0], $new && \%deaths);
    }
}

sub _call_series_once {
    my ($self, $st, $calls, $params) = @_;
    $self->_ensure_server;
    die $st->{poison} if $st->{poison};
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
        push @ids, $self->_send($st, $method, $params->[$i]);
    }
    my @answers = map { $self->_await($_, $self->_deadline) } @ids;
    $self->{busy} = 0;
    die $st->{poison} if $st->{poison};
    return \@answers;
}

sub _result {
    my ($answer, $st) = @_;
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
    my $limit = CRSBridge::Config::get(_limit_key($proc));
    my ($pid, $cmd) = ($proc->pid, $proc->{cmd});
    if ($error->kind eq 'timeout') {
        my $origin = CRSBridge::Config::origin(_limit_key($proc));
        die "crs-bridge: no answer from the server (pid $pid) within $limit s to $method; "
            . "killed it, the next call starts a new one and restores the scheduler objects (limit $origin)\n"
            if $proc->answered;
        die "crs-bridge: cannot start the server '$cmd': no answer within $limit s (limit $origin); killed it\n";
    }
    return if !$deaths || !_gives_up($proc, $deaths);    # retry: a new server, the objects restored
    die "crs-bridge: cannot start the server '$cmd': it ended before answering (" . $proc->log_hint . ")\n"
        if !$proc->answered;
    die "crs-bridge: the server died twice during $method (" . $proc->log_hint . "); giving up on this call\n";
}

# Whether a call gives up after the death of $proc, a server it started, given the earlier
# deaths of such servers (%$deaths, which this counts). A server that dies while it starts
# (before its first answer: killed from outside, slow to start on a loaded machine) is started
# once more, and so is one that dies after answering; the second start in a row that dies (a
# broken command or installation) or the second death after answering gives up. A call so
# starts at most four servers.
sub _gives_up {
    my ($proc, $deaths) = @_;
    if ($proc->answered) {
        $deaths->{start} = 0;
        return $deaths->{answered}++ > 0;
    }
    return $deaths->{start}++ > 0;
}

# (seconds per call, seconds for the first answer of a new server)
sub _limits {
    return (CRSBridge::Config::get('timeout'), CRSBridge::Config::get('start-timeout'));
}

# The setting that limits the wait for an answer of $proc: a new server's first answer may take
# longer (it starts).
sub _limit_key {
    my ($proc) = @_;
    return $proc->answered ? 'timeout' : 'start-timeout';
}

sub _deadline {
    my ($self) = @_;
    return time + CRSBridge::Config::get(_limit_key($self->{proc}));
}

# -- server lifecycle and restore ------------------------------------------------------------

# Starts a server if none runs. One whose last exchange was cut short (busy: a signal handler
# died in it; see INTERRUPTED CALLS) is killed and replaced first.
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
    $self->{number} = ++$SERVERS;
    $self->{srv} = "$SERVERS/$$";
    @$self{qw(dirty frees batches created)} = ([], [], [], {});
    $PENDING = 0;
    $self->{busy} = 1;
    $self->_restore;
    $self->{busy} = 0;
    return;
}

# Re-create every live object on the new server and mark its whole journal as unsent; the
# next flush replays the journals, as one scheduler.apply per object (split if very long).
sub _restore {
    my ($self) = @_;
    my @states = sort { $a->{id} <=> $b->{id} } grep { !$_->{poison} } values %LIVE;
    return if !@states;
    my $first = $self->{next_id};
    my @requests = map {
        qq({"jsonrpc":"2.0","id":) . $self->{next_id}++ . qq(,"method":"scheduler.new","params":) . _new_params($_) . '}'
    } @states;
    my $line = '[' . join(',', @requests) . "]\n";
    utf8::encode($line);
    $self->{proc}->queue($line);
    my $deadline = $self->_deadline;
    my $answers;
    while (!$answers) {
        my $got = $self->{proc}->read_line($deadline);
        $answers = decode_json_text($got) if substr($got, 0, 1) eq '[';
    }
    my %by_id = map { ($_->{id} // '') => $_ } @$answers;
    for my $i (0 .. $#states) {
        my ($st, $answer) = ($states[$i], $by_id{ $first + $i });
        if (!$answer || $answer->{error}) {
            $st->{poison} = "crs-bridge: could not restore this scheduler object on a new server: "
                . ($answer ? $answer->{error}{message} : 'no answer') . "\n";
            next;
        }
        @$st{qw(handle srv sent unborn)} = ($answer->{result}{scheduler}, $self->{srv}, 0, 0);
        push @{ $self->{dirty} }, $st if @{ $st->{jf} };
    }
    return;
}

# -- batches ---------------------------------------------------------------------------------

# Queue all unsent journal entries (one scheduler.apply per object, after the object's
# scheduler.new if it is unborn, see create) and frees as one batch; answers are checked as
# they come. With $hold, the batch waits in the buffer for the request queued next (a call's
# flush, which ends a run); see _next_due for when the next flush is due.
sub _flush {
    my ($self, $hold) = @_;
    $DUE = _next_due($hold);
    $PENDING = 0;
    # (Most queries of a round find nothing to send: they come before the request they go with.)
    return if !$self->{proc} || !@{ $self->{dirty} } && !@{ $self->{frees} };
    my $srv = $self->{srv};
    my (@parts, @ranges, %news);    # ranges: [first id, state (undef: frees), first journal index]
    my $id = $self->{next_id};
    for my $st (@{ $self->{dirty} }) {
        next if $st->{dead} || $st->{poison} || $st->{srv} ne $srv;
        if ($st->{unborn}) {
            $st->{unborn} = 0;
            $news{$id} = $st;
            push @parts, '{"jsonrpc":"2.0","method":"scheduler.new","id":' . $id++
                . ',"params":' . _new_params($st, $st->{handle}) . '}';
        }
        my ($jf, $from) = ($st->{jf}, $st->{sent});
        my $head = ',"params":{"scheduler":' . json_str($st->{handle}) . ',"mutations":[';
        for (my $at = $from; $at < @$jf; $at += APPLY_MAX) {
            my $last = $at + APPLY_MAX - 1 < $#$jf ? $at + APPLY_MAX - 1 : $#$jf;
            push @ranges, [ $id, $st, $at ];
            push @parts, '{"jsonrpc":"2.0","method":"scheduler.apply","id":' . $id++ . $head
                . join(',', @$jf[ $at .. $last ]) . ']}}';
        }
        $st->{sent} = @$jf;
    }
    $self->{dirty} = [];
    push @ranges, [ $id, undef, 0 ];
    for my $handle (@{ $self->{frees} }) {
        push @parts, '{"jsonrpc":"2.0","method":"scheduler.free","id":' . $id++
            . ',"params":{"scheduler":' . json_str($handle) . '}}';
    }
    $self->{frees} = [];
    return if !@parts;
    my $line = '[' . join(',', @parts) . "]\n";
    utf8::encode($line);
    push @{ $self->{batches} }, { first => $self->{next_id}, last => $id - 1, ranges => \@ranges, news => \%news };
    $self->{next_id} = $id;
    $self->{proc}->queue($line, $hold);
    return;
}

# How many entries make the flush after this one due (see FIRST_CHUNK and TAIL_CHUNK): at a
# call's flush ($hold), which ends a run (unless it was empty), FIRST_CHUNK; else twice as many
# as this one's, up to CHUNK; but TAIL_SHARE of what the last run says is still to come, up to
# CHUNK, unless that is fewer than TAIL_CHUNK.
sub _next_due {
    my ($hold) = @_;
    my $due = $DUE * 2 < CHUNK ? $DUE * 2 : CHUNK;
    if ($hold) {
        $EXPECTED = $RUN >= FIRST_CHUNK ? $RUN : 0 if $RUN;
        ($RUN, $due) = (0, FIRST_CHUNK);
    }
    my $share = POSIX::ceil(TAIL_SHARE * ($EXPECTED - $RUN));
    return $share < TAIL_CHUNK ? $due : $share < CHUNK ? $share : CHUNK;
}

# A flush from mutate: a dead server must not fail the mutation (the next call notices it,
# starts a new server and restores everything). After an interrupted exchange nothing is sent:
# the next call replaces the server and replays every journal anyway.
sub _flush_quietly {
    my ($self) = @_;
    return if $self->{busy};
    $self->{busy} = 1;
    if (eval { $self->_flush; 1 }) {
        $self->{busy} = 0;
        return;
    }
    my $error = $@;
    die $error if !(ref $error && $error->isa('CRSBridge::Process::Error'));
    return;
}

# Read answers until the one for request $id; batch answers on the way are checked.
sub _await {
    my ($self, $id, $deadline) = @_;
    while (1) {
        my $line = $self->{proc}->read_line($deadline);
        my $answer = $self->_take_line($line, $id) or next;
        $ANSWER = \$line;
        return $answer;
    }
}

# Takes in the answers that have arrived, without waiting: a batch's that nobody waits for
# would pile up in the read buffer and in {batches}. Not in an unfinished exchange (busy: the
# next call replaces the server), and busy meanwhile: a signal handler that dies here (an alarm)
# leaves a line taken out of the buffer and not yet checked, an unfinished exchange. So does a
# dead server, which the next call replaces.
sub _take_arrived {
    my ($self) = @_;
    return if $self->{busy} || !@{ $self->{batches} };
    $self->{busy} = 1;
    my $taken = eval {
        while (defined(my $line = $self->{proc}->ready_line)) {
            $self->_take_line($line, undef);
        }
        1;
    };
    my $error = $@;
    die $error if !$taken && !(ref $error && $error->isa('CRSBridge::Process::Error'));
    $self->{busy} = 0 if $taken;
    return;
}

# An answer line of the server: a batch's or a refused batch's is checked (false), the one for
# request $id is returned decoded; anything else dies.
sub _take_line {
    my ($self, $line, $id) = @_;
    if (substr($line, 0, 1) eq '[') {
        $self->_batch_answered($line);
        return;
    }
    my $answer = _decoded($line);
    return $answer if defined $id && defined $answer->{id} && $answer->{id} eq $id;
    if (!defined $answer->{id} && $answer->{error} && @{ $self->{batches} }) {
        # A batch refused as a whole (e.g. over the server's size limit).
        my $batch = shift @{ $self->{batches} };
        _poison($_, $answer->{error}{message}, 'batch') for _owners($batch);
        return;
    }
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

sub _batch_answered {
    my ($self, $line) = @_;
    my $batch = shift @{ $self->{batches} };
    return if index($line, '"error"') < 0;    # all mutations succeeded (their results are null)
    my $answers = decode_json_text($line);
    for my $answer (@$answers) {
        next if !$answer->{error} || !$batch;
        if (my $st = $batch->{news}{ $answer->{id} // '' }) {
            _poison($st, $answer->{error}{message} // 'no message', 'scheduler.new');
            next;
        }
        my ($st, $first) = _owner($batch, $answer->{id} // -1) or next;
        _refused($st, $first, $answer->{error});
    }
    return;
}

# A scheduler.apply of $st's journal from entry $first on was refused: poison $st, naming the
# failing entry's method, with the server's message as the single call would have worded it.
sub _refused {
    my ($st, $first, $error) = @_;
    my $message = $error->{message} // 'no message';
    my $data = ref $error->{data} eq 'HASH' ? $error->{data} : {};
    my $index = $data->{index} // ($message =~ /\bmutations\[(\d+)\]/ ? $1 : 0);
    my ($method) = ($st->{jf}[ $first + $index ] // '') =~ /^\["([^"]+)"/;
    $message =~ s/\bmutations\[$index\]\.//g;
    _poison($st, $message, $method // 'mutation');
    return;
}

# The state and first journal index request $id of a batch was sent for (empty for a free).
sub _owner {
    my ($batch, $id) = @_;
    return if $id < $batch->{first} || $id > $batch->{last};
    my ($range) = grep { $_->[0] <= $id } reverse @{ $batch->{ranges} };    # (a new's id is in none)
    return if !$range || !$range->[1];
    return ($range->[1], $range->[2] + $id - $range->[0]);
}

# The states with requests in a batch.
sub _owners {
    my ($batch) = @_;
    my @ranges = @{ $batch->{ranges} };
    my @states;
    for my $i (0 .. $#ranges) {
        my ($start, $st) = @{ $ranges[$i] };
        my $end = $i < $#ranges ? $ranges[ $i + 1 ][0] - 1 : $batch->{last};
        push @states, $st if $st && $start <= $batch->{last} && $end >= $batch->{first};
    }
    return @states;
}

sub _poison {
    my ($st, $message, $method) = @_;
    $st->{poison} //= "crs-bridge: the server refused a buffered $method of this scheduler object"
        . " ($message); the object is unusable, create a new one\n";
    return;
}

# -- object end, fork, process end -----------------------------------------------------------

=item release(\%state)

Called when an object is destroyed: forgets it and frees its server-side state with the next
batch, unless its handle belongs to another server (a forked parent's, or a dead one).

=cut

sub release {
    my ($class, $st) = @_;
    delete $LIVE{ $st->{id} // '' };
    $st->{dead} = 1;
    my $self = $CURRENT;
    return if !$self || $self->{pid} != $$ || !$self->{proc} || ($st->{srv} // '') ne $self->{srv};
    return if $st->{unborn};    # never sent: nothing to free
    push @{ $self->{frees} }, $st->{handle};
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
