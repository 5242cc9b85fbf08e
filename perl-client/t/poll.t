#!/usr/bin/perl
# The client polls briefly for an answer before it sleeps in select (CRSBridge::Process::_poll):
# it takes what arrives, reads nothing while the machine has no CPU free, and a server's end or
# a signal handler that dies still end the wait as they do in select.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use IO::Handle;
use Test::More;
use CRSBridge::Process;
use FaultAid;

# A process object reading from a pipe this test writes to (no server).
sub reading_end {
    pipe(my $out, my $to_client) or die "pipe: $!\n";
    $out->blocking(0);
    $to_client->autoflush(1);
    my $proc = bless { out => $out, rbuf => '', wbuf => '', ended => 0, grace => 0, graces => 0 }, 'CRSBridge::Process';
    return ($proc, $to_client);
}

subtest 'an answer waiting is taken' => sub {
    no warnings 'redefine';
    local *CRSBridge::Load::cpu_free = sub { 1 };
    my ($proc, $server) = reading_end();
    print {$server} qq({"id":1}\n);
    ok($proc->_poll, 'polling found the answer');
    is($proc->{rbuf}, qq({"id":1}\n), 'and read it whole');
    ok(!$proc->_poll, 'nothing more: it gives up');
    is($proc->read_line(time + 5), '{"id":1}', 'read_line returns it');
};

subtest 'no CPU free: nothing is read by polling' => sub {
    no warnings 'redefine';
    local *CRSBridge::Load::cpu_free = sub { 0 };
    my ($proc, $server) = reading_end();
    print {$server} qq({"id":2}\n);
    ok(!$proc->_poll, 'no poll');
    is($proc->{rbuf}, '', 'the answer is left to select');
    is($proc->read_line(time + 5), '{"id":2}', 'which reads it');
};

subtest 'a server that ends while polled for' => sub {
    no warnings 'redefine';
    local *CRSBridge::Load::cpu_free = sub { 1 };
    my ($proc, $server) = reading_end();
    close($server);
    my $error = eval { $proc->_poll; 1 } ? undef : $@;
    isa_ok($error, 'CRSBridge::Process::Error');
    is($error && $error->kind, 'died', 'its end is a died error, as from select');
};

subtest 'a wall clock set back does not prolong the poll' => sub {
    no warnings 'redefine';
    local *CRSBridge::Load::cpu_free = sub { 1 };
    my $now = 2e9;
    local *CRSBridge::Process::time = sub { return $now -= 3600 };    # an hour back at every look
    my ($proc, $server) = reading_end();    # a server that says nothing
    my $polled = eval { watchdog(10, 'the poll', sub { $proc->_poll }) };
    is($@, '', 'the poll ends (it polls for a millisecond of a clock that never goes back)');
    ok(!$polled, '... having found nothing');
};

# As many as nproc(1) counts, and the server (bridge/transport.py BriefPoll: the CPUs it may run
# on): a container's cpuset or a taskset leaves fewer than are online, and a poller sharing its
# CPU with the server it waits for keeps it from answering.
subtest 'the CPUs this process may run on are counted' => sub {
    # (nproc would print OMP_NUM_THREADS instead.)
    my $nproc = `env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null`;
    SKIP: {
        skip 'no nproc here', 1 if $? || $nproc !~ /^(\d+)$/;
        is(CRSBridge::Load::cpus_usable(), $1, 'as many as nproc counts');
    }
    my $pinned = `taskset -c 0 $^X -I$FindBin::Bin/../lib -MCRSBridge::Load -e 'print CRSBridge::Load::cpus_usable()' 2>/dev/null`;
    SKIP: {
        skip 'no taskset here (or no CPU 0)', 1 if $?;
        is($pinned, 1, 'one, when pinned to one CPU');
    }
};

done_testing();
