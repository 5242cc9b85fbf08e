#!/usr/bin/perl
# A server whose Perl client disappears ends by itself, with exit status 0, and leaves no
# process behind, busy-looping or a zombie: the client exits normally, is killed (SIGKILL)
# while idle, is killed while the server still has a request to answer, or replaces itself by
# another program (exec). The server is no child of the client (it is started as a
# grandchild), so it is never the zombie of a process that no longer knows it. A forked child
# that inherited the client's pipes does not keep the server: a client exiting normally stops
# it at once (it asks it to shut down); when the client is killed, the server sees its client
# gone (it watches the client's process id) and exits although the child holds its input open.
#
# This test makes itself a child subreaper (Linux), so the orphaned servers are re-parented
# to it and their exit status can be collected.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use Time::HiRes ();
use CRSBridgeTest;
use FaultAid;

my $SUBREAPER = become_subreaper();
note($SUBREAPER ? 'subreaper: exit statuses are checked' : 'no subreaper: only that the servers end');

# The client: builds a Dynamic object (so its server runs), prints the server's pid, then does
# what it is told on its stdin: 'idle' (wait), 'query' (a query with many buffered mutations,
# announced on stdout first), 'exit', 'exec' (re-exec itself, as a daemon does on reload: the
# same program in the same process starts over), 'fork' (fork a child that sleeps, print its
# pid, wait). Prints 'server killed' if it ever has to kill its server.
my $CLIENT = <<'PERL';
use strict;
use warnings;
use CRSBridgeTest;
use CRSBridge::Connection;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Dynamic;
$| = 1;
{
    no warnings 'redefine';
    my $kill = \&CRSBridge::Process::kill;
    *CRSBridge::Process::kill = sub { print "server killed\n"; return $kill->(@_) };
}
my $u = PVE::RS::ResourceScheduling::Dynamic->new();
$u->add_node("n$_", { cpu => 1, maxcpu => 16, mem => GiB, maxmem => 64 * GiB }) for 1 .. 3;
$u->calculate_node_imbalance;
print CRSBridge::Connection->instance->server_pid, "\n";
# Run on: the server's parent is not this process (as when the drop-in is used by a daemon).
while (my $command = <STDIN>) {
    chomp $command;
    if ($command eq 'query') {
        $u->add_resource("vm:$_", { stats => { cpu => 1, maxcpu => 2, mem => GiB, maxmem => GiB }, running => 1,
            'current-node' => 'n1' }) for 1 .. 20_000;
        print "querying\n";
        $u->calculate_node_imbalance;
        print "answered\n";
    } elsif ($command eq 'exit') {
        exit 0;
    } elsif ($command eq 'exec') {
        exec($^X, map({ "-I$_" } @INC[0, 1]), '-e', $ENV{CRS_TEST_CLIENT}) or die "exec: $!";
    } elsif ($command eq 'fork') {
        my $pid = fork() // die "fork: $!";
        if (!$pid) { sleep 60; exit 0 }
        print "$pid\n";
    }
}
PERL

# Starts a client; returns { pid, server (its server's pid), in, out (its stdin and stdout) }.
sub spawn_client {
    pipe(my $from_client, my $client_stdout) or die "pipe: $!";
    pipe(my $client_stdin, my $to_client) or die "pipe: $!";
    my $pid = fork() // die "fork: $!";
    if (!$pid) {
        open(STDIN, '<&', $client_stdin) or die "dup: $!";
        open(STDOUT, '>&', $client_stdout) or die "dup: $!";
        $ENV{CRS_TEST_CLIENT} = $CLIENT;
        exec($^X, "-I$FindBin::Bin/lib", "-I$FindBin::Bin/../lib", '-e', $CLIENT) or die "exec: $!";
    }
    close($_) for $client_stdin, $client_stdout;
    $to_client->autoflush(1);
    my $server = watchdog(30, 'starting a client', sub { scalar <$from_client> });
    chomp($server //= '');
    die "the client did not start its server\n" if $server !~ /^\d+$/;
    return { pid => $pid, server => $server, in => $to_client, out => $from_client };
}

sub command {
    my ($client, $command) = @_;
    print { $client->{in} } "$command\n";
    return;
}

sub read_client {
    my ($client) = @_;
    my $line = watchdog(30, 'reading from the client', sub { scalar readline($client->{out}) }) // '';
    chomp $line;
    return $line;
}

sub kill_client {
    my ($client) = @_;
    kill('KILL', $client->{pid});
    waitpid($client->{pid}, 0);
    return;
}

# The server ended (within 20 s), cleanly when its status can be seen; if it still runs, it
# must at least be idle, not spinning.
sub server_ended {
    my ($server, $name) = @_;
    my ($how, $status) = wait_gone($server, 20);
    ok($how ne 'running', "$name: the server ended ($how)") or check_idle($server, $name);
    is($status, 0, "$name: exit status 0") if $how eq 'reaped';
    return;
}

sub check_idle {
    my ($pid, $name) = @_;
    my $before = cpu_ticks($pid) // return;
    Time::HiRes::sleep(0.5);
    my $after = cpu_ticks($pid) // return;
    cmp_ok($after - $before, '<', 10, "$name: the server (state " . (process_state($pid) // 'gone') . ') is idle, not busy');
    return;
}

subtest 'the client exits normally' => sub {
    my $client = spawn_client();
    command($client, 'exit');
    waitpid($client->{pid}, 0);
    is($?, 0, 'the client exited');
    my ($how) = wait_gone($client->{server}, 20);
    like($how, qr/^(gone|reaped)$/, "its server ended ($how)") or diag('parent ', parent_pid($client->{server}), " me $$ client $client->{pid}");
};

subtest 'the client is killed while idle' => sub {
    my $client = spawn_client();
    kill_client($client);
    server_ended($client->{server}, 'idle');
};

subtest 'the client is killed while the server has a request to answer' => sub {
    my $client = spawn_client();
    kill('STOP', $client->{server});    # the request waits for the server, the answer for nobody
    command($client, 'query');
    is(read_client($client), 'querying', 'the client sends its query');
    Time::HiRes::sleep(0.2);              # let it write what the pipe takes
    kill_client($client);
    kill('CONT', $client->{server});
    server_ended($client->{server}, 'mid-call');
};

subtest 'the server is no child of its client' => sub {
    my $client = spawn_client();
    my $parent = parent_pid($client->{server});
    ok(defined $parent && $parent != $client->{pid}, "the server's parent ($parent) is not the client ($client->{pid})");
    command($client, 'exit');
    waitpid($client->{pid}, 0);
    server_ended($client->{server}, 'not a child');
};

subtest 'the client re-executes itself (exec, same process)' => sub {
    my $client = spawn_client();
    command($client, 'exec');
    # The pipes to the server are close-on-exec: the server sees the end of its input while
    # the new program runs in the client's process, which knows nothing of it; it is reaped by
    # its own parent (init, or this test as a subreaper), not left a zombie of that program.
    my $new_server = read_client($client);
    like($new_server, qr/^\d+$/, 'the re-executed client started a server of its own and got answers');
    isnt($new_server, $client->{server}, '... a new one');
    my ($how, $status) = wait_gone($client->{server}, 20);
    if ($SUBREAPER) {
        is($how, 'reaped', 'the old server ended and was reaped while the client runs on');
        is($status, 0, '... exit status 0');
    } else {
        like($how, qr/^(gone|zombie)$/, 'the old server ended while the client runs on');
        isnt(parent_pid($client->{server}) // 0, $client->{pid}, '... and is no zombie of the client') if $how eq 'zombie';
    }
    command($client, 'exit');
    waitpid($client->{pid}, 0);
    server_ended($new_server, 'the new one, after the client exited');
};

subtest 'a forked child keeps the pipes, the client exits normally: its server stops at once' => sub {
    my $client = spawn_client();
    command($client, 'fork');
    my $child = read_client($client);
    like($child, qr/^\d+$/, 'the client forked a child');
    command($client, 'exit');
    watchdog(30, 'the client exiting', sub { waitpid($client->{pid}, 0) });
    is($?, 0, 'the client exited');
    $client->{out}->blocking(0);    # the child holds the pipe open: no end of file
    my $said = join('', grep { defined } readline($client->{out}));
    is($said, '', 'it did not have to kill its server (it asked it to shut down)');
    my ($how) = wait_gone($client->{server}, 20);
    like($how, qr/^(gone|reaped)$/, 'the server ended while the child lives on');
    kill('KILL', $child);
    waitpid($child, 0) if $SUBREAPER;
};

subtest 'a forked child keeps the pipes, the client is killed: the server ends all the same' => sub {
    my $client = spawn_client();
    command($client, 'fork');
    my $child = read_client($client);
    like($child, qr/^\d+$/, 'the client forked a child');
    kill_client($client);
    server_ended($client->{server}, 'client killed, child alive');
    ok(defined process_state($child), 'the child, holding the pipes, still runs');
    kill('KILL', $child);
    waitpid($child, 0) if $SUBREAPER;
};

done_testing();
