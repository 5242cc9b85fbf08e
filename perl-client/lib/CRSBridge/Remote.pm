package CRSBridge::Remote;

use strict;
use warnings;

use CRSBridge::Codec qw(json_str);

=head1 NAME

CRSBridge::Remote - a scheduler object as the server holds it

=head1 DESCRIPTION

What the connection knows of one scheduler object (L<CRSBridge::Connection> creates it, the
batches and the restore of a new server use it): its mode and imbalance formula, its handle on
the server and which server that is, how much of its journal (its mirror's, see
L<CRSBridge::Mirror>) that server has been sent, whether its C<scheduler.new> is still to be
sent, and whether it is unusable (poisoned: the server refused one of its buffered mutations,
or it could not be restored on a new server). Other modules read and change it through the
methods below.

=head1 METHODS

=over

=item new($id, $mode, $imbalance, $mirror)

C<$id>: unique in this process, ascending in creation order (objects are restored in it).

=cut

sub new {
    my ($class, $id, $mode, $imbalance, $mirror) = @_;
    return bless {
        id => $id, mode => $mode, imbalance => $imbalance, mirror => $mirror,
        handle => undef, srv => '', sent => 0, unborn => 0, poison => undef,
    }, $class;
}

=item id() / handle() / kind()

The id; the server-side handle; mode and formula in one string (objects of one kind are
created alike).

=cut

sub id { return $_[0]{id} }
sub handle { return $_[0]{handle} }
sub kind { return "$_[0]{mode} $_[0]{imbalance}" }

=item entries()

The journal (see L<CRSBridge::Mirror>): an array reference, to read.

=cut

sub entries { return $_[0]{mirror}->journal }

=item new_params($with_handle)

The params of its C<scheduler.new> (a JSON object), naming its handle if C<$with_handle>.

=cut

sub new_params {
    my ($self, $with_handle) = @_;
    return '{"mode":' . json_str($self->{mode}) . ',"imbalance":' . json_str($self->{imbalance})
        . ($with_handle ? ',"scheduler":' . json_str($self->{handle}) : '') . '}';
}

=item bind($handle, $srv, $unborn)

The object lives as C<$handle> on server C<$srv>, which has none of its journal yet; with
C<$unborn>, its C<scheduler.new> is still to be sent (with its first batch).

=cut

sub bind {
    my ($self, $handle, $srv, $unborn) = @_;
    @$self{qw(handle srv sent unborn)} = ($handle, $srv, 0, $unborn ? 1 : 0);
    return;
}

=item on_server($srv) / unborn()

Whether its handle is valid on server C<$srv>; whether its C<scheduler.new> is still to be sent.

=cut

sub on_server { return $_[0]{srv} eq $_[1] }
sub unborn { return $_[0]{unborn} }

=item born()

Its C<scheduler.new> is sent (the batch that carries it is being queued).

=cut

sub born { $_[0]{unborn} = 0; return }

=item unsent()

Whether its server lacks anything of it: its creation or journal entries.

=item take_unsent()

The journal entries not yet sent, as C<($first_index, \@journal)>; they count as sent from now.

=item all_sent()

Every journal entry counts as sent (a single call has just carried the last one).

=cut

sub unsent { return $_[0]{unborn} || $_[0]{sent} < @{ $_[0]{mirror}->journal } }

sub take_unsent {
    my ($self) = @_;
    my ($journal, $from) = ($self->{mirror}->journal, $self->{sent});
    $self->{sent} = @$journal;
    return ($from, $journal);
}

sub all_sent {
    my ($self) = @_;
    $self->{sent} = @{ $self->{mirror}->journal };
    return;
}

=item usable() / check_usable()

False when the object is unusable; C<check_usable> dies then, saying why.

=cut

sub usable { return !$_[0]{poison} }

sub check_usable {
    die $_[0]{poison} if $_[0]{poison};
    return;
}

=item poison($message, $method)

Makes the object unusable: the server refused its buffered C<$method> (or a whole batch,
C<$method> 'batch') with C<$message>. The first reason stays.

=item poison_restore($message)

Makes the object unusable: it could not be restored on a new server.

=cut

sub poison {
    my ($self, $message, $method) = @_;
    $self->{poison} //= "crs-bridge: the server refused a buffered $method of this scheduler object"
        . " ($message); the object is unusable, create a new one\n";
    return;
}

sub poison_restore {
    my ($self, $message) = @_;
    $self->{poison} //= "crs-bridge: could not restore this scheduler object on a new server: $message\n";
    return;
}

=back

=cut

1;
